package registry

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseContextRangeReadsLlmdLabels(t *testing.T) {
	tests := map[string]struct {
		value string
		want  ContextRange // zero: an error
	}{
		"short pods":            {value: "0-2048", want: ContextRange{Min: 0, Max: 2048, Labelled: true}},
		"long pods":             {value: "2048-8192", want: ContextRange{Min: 2048, Max: 8192, Labelled: true}},
		"one length":            {value: "512-512", want: ContextRange{Min: 512, Max: 512, Labelled: true}},
		"leading zeros":         {value: "0100-0200", want: ContextRange{Min: 100, Max: 200, Labelled: true}},
		"beyond every prompt":   {value: "0-99999999999999999999", want: ContextRange{Max: MaxContextTokens, Labelled: true}},
		"empty":                 {value: ""},
		"one number":            {value: "2048"},
		"min greater than max":  {value: "8192-2048"},
		"three numbers":         {value: "0-2048-4096"},
		"no min":                {value: "-2048"},
		"no max":                {value: "2048-"},
		"a unit":                {value: "0-8k"},
		"a sign":                {value: "+1-2"},
		"a list of two ranges":  {value: "0-2048,4096-8192"},
		"underscore for hyphen": {value: "0_2048"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseContextRange(tc.value)
			if tc.want == (ContextRange{}) {
				if err == nil || got != (ContextRange{}) {
					t.Fatalf("ParseContextRange(%q) = %+v, %v; want an error and no range", tc.value, got, err)
				}
				if !strings.Contains(err.Error(), strconv.Quote(tc.value)) {
					t.Errorf("error %q does not quote the value", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseContextRange(%q): %v", tc.value, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseContextRange(%q) (-want +got):\n%s", tc.value, diff)
			}
		})
	}
}

func TestContextRangeHolds(t *testing.T) {
	r := ContextRange{Min: 2048, Max: 8192, Labelled: true}
	for tokens, want := range map[int]bool{0: false, 2047: false, 2048: true, 5000: true, 8192: true, 8193: false} {
		if got := r.Holds(tokens); got != want {
			t.Errorf("%v.Holds(%d) = %v, want %v", r, tokens, got, want)
		}
	}
	if !(ContextRange{}).Holds(1 << 40) {
		t.Error("an unlabelled pod does not take a long prompt")
	}
}

// A worker follows its pod's context-length label: an edit keeps the
// worker, with the request in flight on it, and the new range is what the
// worker reports.
func TestContextRangeFollowsTheLabel(t *testing.T) {
	r := New()
	ep := endpoint("a", "10.0.0.1:8000")
	ep.Context = ContextRange{Max: 2048, Labelled: true}
	r.Replace([]Endpoint{ep})
	w := r.Workers()[0]
	if got := w.ContextRange(); got != ep.Context {
		t.Fatalf("ContextRange() = %v, want %v", got, ep.Context)
	}
	g := w.Admit()
	defer g.Release()
	for _, c := range []ContextRange{{Min: 2048, Max: 32768, Labelled: true}, {}, {Min: 0, Max: 0, Labelled: true}} {
		ep.Context = c
		r.Update([]Endpoint{ep}, nil)
		now, _ := lookup(r, ep.Key)
		if now != w || w.InFlight() != 1 || len(r.Workers()) != 1 {
			t.Fatalf("range %q: the worker is %p (was %p) with %d in flight; want the same with 1", c, now, w, w.InFlight())
		}
		if got, gotEp := w.ContextRange(), w.Endpoint().Context; got != c || gotEp != c {
			t.Errorf("after the label became %q: ContextRange() = %q, Endpoint().Context = %q", c, got, gotEp)
		}
	}
}

// FuzzParseContextRange checks that any label value either parses into a
// range whose bounds are in order and under MaxContextTokens, and that
// reads back the same from its String, or is refused with no range.
func FuzzParseContextRange(f *testing.F) {
	for _, s := range []string{"0-2048", "2048-8192", "", "-", "1-", "-1", "8192-2048", "0-99999999999999999999", "2147483647-2147483648", "0-1-2", "a-b", "0-2048,4096-8192"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseContextRange(s)
		if err != nil {
			if r != (ContextRange{}) {
				t.Fatalf("ParseContextRange(%q) failed (%v) and returned %+v", s, err, r)
			}
			return
		}
		if !r.Labelled || r.Min > r.Max || r.Max > MaxContextTokens {
			t.Fatalf("ParseContextRange(%q) = %+v", s, r)
		}
		if back := unpackContextRange(r.pack()); back != r {
			t.Fatalf("packed and unpacked %+v reads %+v", r, back)
		}
		again, err := ParseContextRange(r.String())
		if err != nil || again != r {
			t.Fatalf("%q reads %+v, whose String %q reads %+v, %v", s, r, r.String(), again, err)
		}
		lo, hi, _ := strings.Cut(s, "-")
		if n, err := strconv.ParseUint(lo, 10, 64); err == nil && n <= MaxContextTokens && uint64(r.Min) != n {
			t.Fatalf("%q: min %d, want %d", s, r.Min, n)
		}
		if n, err := strconv.ParseUint(hi, 10, 64); err == nil && n <= MaxContextTokens && uint64(r.Max) != n {
			t.Fatalf("%q: max %d, want %d", s, r.Max, n)
		}
	})
}

package scrape

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSeries(t *testing.T) {
	waiting := Series{Name: "nv_trt_llm_request_metrics", Labels: []LabelMatch{{"request_type", "waiting"}}}
	cases := map[string]struct {
		spec    string
		want    Series
		wantErr string
	}{
		"a name":                       {spec: "vllm:num_requests_waiting", want: Series{Name: "vllm:num_requests_waiting"}},
		"quoted as charts render it":   {spec: `"sglang:num_queue_reqs"`, want: Series{Name: "sglang:num_queue_reqs"}},
		"single quotes":                {spec: `'sglang:token_usage'`, want: Series{Name: "sglang:token_usage"}},
		"a bare label value":           {spec: "nv_trt_llm_request_metrics{request_type=waiting}", want: waiting},
		"a quoted label value":         {spec: `nv_trt_llm_request_metrics{request_type="waiting"}`, want: waiting},
		"the whole spec quoted":        {spec: `"nv_trt_llm_request_metrics{request_type=waiting}"`, want: waiting},
		"blanks and a trailing comma":  {spec: ` nv_trt_llm_request_metrics { request_type = "waiting" , } `, want: waiting},
		"empty braces":                 {spec: "m{}", want: Series{Name: "m"}},
		"two matchers and escapes":     {spec: `m{a="x\"y\\z",b=w}`, want: Series{Name: "m", Labels: []LabelMatch{{"a", `x"y\z`}, {"b", "w"}}}},
		"empty names nothing":          {spec: `""`, want: Series{}},
		"not equal":                    {spec: "m{a!=x}", wantErr: "only equality matchers"},
		"regexp":                       {spec: `m{a=~"x.*"}`, wantErr: "only equality matchers"},
		"no name":                      {spec: `{__name__="m"}`, wantErr: "no metric name"},
		"bad name":                     {spec: "9m", wantErr: "no metric name"},
		"text after the name":          {spec: "m x", wantErr: `unexpected "x"`},
		"unclosed braces":              {spec: "m{a=x", wantErr: "no closing brace"},
		"unterminated value":           {spec: `m{a="x}`, wantErr: "unterminated"},
		"no value":                     {spec: "m{a=}", wantErr: "no value"},
		"label twice":                  {spec: "m{a=x,a=y}", wantErr: "twice"},
		"text after the braces":        {spec: "m{a=x} 1", wantErr: "after the label matchers"},
		"a name longer than 64 bytes":  {spec: strings.Repeat("m", 65), wantErr: "longer than"},
		"an unknown escape":            {spec: `m{a="\t"}`, wantErr: "escape"},
		"a label name that is a digit": {spec: "m{1=x}", wantErr: "no label name"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSeries(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseSeries(%q) error = %v, want one mentioning %q", tc.spec, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSeries(%q) error = %v", tc.spec, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseSeries(%q) (-want +got):\n%s", tc.spec, diff)
			}
		})
	}
}

// FuzzParseSeries checks that ParseSeries never panics, that what it
// accepts compiles into a Schema, and that a parsed series reads back the
// same from its String form.
func FuzzParseSeries(f *testing.F) {
	for _, seed := range []string{
		"vllm:num_requests_waiting",
		`"sglang:num_queue_reqs"`,
		"nv_trt_llm_request_metrics{request_type=waiting}",
		`m{a="x\"y\\z\n", b = w ,}`,
		"m{a!=x}",
		`m{a=~"x"}`,
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := ParseSeries(spec)
		if err != nil || s.Name == "" {
			return
		}
		if _, err := NewSchema(Names{Waiting: []Series{s}}); err != nil {
			t.Fatalf("NewSchema() rejects %+v, which ParseSeries(%q) returned: %v", s, spec, err)
		}
		again, err := ParseSeries(s.String())
		if err != nil {
			t.Fatalf("ParseSeries(%q) error = %v, of the String of ParseSeries(%q)", s.String(), err, spec)
		}
		if diff := cmp.Diff(s, again); diff != "" {
			t.Errorf("ParseSeries(String()) differs (-first +again):\n%s", diff)
		}
	})
}

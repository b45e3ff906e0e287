package session

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecode(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	long := strings.Repeat("a", 63) + "/" + strings.Repeat("b", 253)
	for name, tc := range map[string]struct {
		token   string
		want    string
		wantErr error
	}{
		"a pod":                        {token: b64([]byte("ns/vllm-0")), want: "ns/vllm-0"},
		"the longest namespace/name":   {token: b64([]byte(long)), want: long},
		"a static endpoint":            {token: b64([]byte("/127.0.0.1:8000")), want: "/127.0.0.1:8000"},
		"empty":                        {wantErr: ErrEmpty},
		"one byte longer than any pod": {token: b64([]byte(long + "c")), wantErr: ErrTooLong},
		"not base64":                   {token: "bnMvdmxsbS0w!", wantErr: ErrBase64},
		"unpadded":                     {token: "bnMvdmxsbS0", wantErr: ErrBase64},
		"url alphabet":                 {token: b64([]byte("ns/a>b?"))[:4] + "-_", wantErr: ErrBase64},
		"no slash":                     {token: b64([]byte("vllm-0")), wantErr: ErrNoSlash},
	} {
		t.Run(name, func(t *testing.T) {
			var r Ref
			err := r.Decode([]byte(tc.token))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Decode(%q) error %v, want %v", tc.token, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, string(r.Bytes())); diff != "" {
				t.Errorf("Decode(%q) (-want +got):\n%s", tc.token, diff)
			}
			if got := r.Valid(); got != (tc.wantErr == nil) {
				t.Errorf("Valid() = %v after error %v", got, err)
			}
		})
	}
}

// A token the picker writes is the standard base64 of namespace/name, as
// llm-d writes it, and names its pod when read back.
func TestAppendTokenRoundTrip(t *testing.T) {
	tok := AppendToken(nil, "ns", "vllm-0")
	if diff := cmp.Diff(base64.StdEncoding.EncodeToString([]byte("ns/vllm-0")), string(tok)); diff != "" {
		t.Fatalf("token (-want +got):\n%s", diff)
	}
	var r Ref
	if err := r.Decode(tok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns, name string
		want     bool
	}{{"ns", "vllm-0", true}, {"ns", "vllm-1", false}, {"n", "s/vllm-0", false}, {"", "ns/vllm-0", false}} {
		if got := r.Is(tc.ns, tc.name); got != tc.want {
			t.Errorf("Is(%q, %q) = %v, want %v", tc.ns, tc.name, got, tc.want)
		}
	}
}

func TestDecodeAllocatesNothing(t *testing.T) {
	var r Ref
	tok := AppendToken(nil, "ns", "vllm-0")
	if n := testing.AllocsPerRun(100, func() { _ = r.Decode(tok) }); n != 0 {
		t.Errorf("Decode allocates %v times", n)
	}
}

// FuzzDecode: any header value decodes without a panic; an accepted one is
// the standard base64 of what it names, at most MaxRef bytes with a slash.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "bnMvdmxsbS0w", "Lw==", "////", "=", "bnMvdmxsbS0w\r\n", strings.Repeat("QUFB", 110)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, token []byte) {
		var r Ref
		if err := r.Decode(token); err != nil {
			if r.Valid() {
				t.Fatalf("Decode(%q) failed (%v) but names %q", token, err, r.Bytes())
			}
			return
		}
		got := r.Bytes()
		if len(got) == 0 || len(got) > MaxRef || !bytes.Contains(got, []byte("/")) {
			t.Fatalf("Decode(%q) = %q: want 1 to %d bytes with a slash", token, got, MaxRef)
		}
		want, err := base64.StdEncoding.DecodeString(string(token))
		if err != nil || !bytes.Equal(want, got) {
			t.Fatalf("Decode(%q) = %q, the standard decoder %q (%v)", token, got, want, err)
		}
		i := bytes.IndexByte(got, '/')
		if !r.Is(string(got[:i]), string(got[i+1:])) {
			t.Fatalf("Decode(%q) = %q does not name its own pod", token, got)
		}
	})
}

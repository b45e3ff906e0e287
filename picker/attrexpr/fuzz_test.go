package attrexpr

import (
	"math"
	"testing"
)

var seeds = []string{
	"usage.completion_tokens",
	"has(usage.completion_tokens)",
	"(has(usage.prompt_tokens) ? usage.prompt_tokens : 0) + (has(usage.completion_tokens) ? usage.completion_tokens : 0)",
	"usage.prompt_tokens / usage.completion_tokens > 2.0 || !(usage.total_tokens == 0)",
	"-9223372036854775808 % -1",
	"0x7fffffffffffffff * 2 // overflow",
	"1e308 * 10.0",
	".5 <= usage.total_tokens ? -usage.prompt_tokens : 3 - 4",
	"size(usage)",
	"usage['x']",
	"!!-usage.prompt_tokens --true 0x 0X1",
}

// FuzzParse checks that Parse never panics and that what it accepts keeps
// its source.
func FuzzParse(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		e, err := Parse(src)
		if err == nil && e.String() != src {
			t.Fatalf("String() = %q, want %q", e.String(), src)
		}
	})
}

// FuzzEval evaluates whatever parses over the given counts, as a number and
// as a condition, and checks that it never panics and that an error comes
// with no value.
func FuzzEval(f *testing.F) {
	for _, s := range seeds {
		f.Add(s, int64(32), int64(10), int64(42))
		f.Add(s, int64(0), int64(0), int64(math.MaxInt64))
	}
	f.Fuzz(func(t *testing.T, src string, prompt, completion, total int64) {
		e, err := Parse(src)
		if err != nil {
			return
		}
		u := Usage{prompt, completion, total}
		if v, err := e.Int(&u); err != nil && v != 0 {
			t.Fatalf("Int(%q) = %d with error %v", src, v, err)
		}
		if b, err := e.Bool(&u); err != nil && b {
			t.Fatalf("Bool(%q) = true with error %v", src, err)
		}
	})
}

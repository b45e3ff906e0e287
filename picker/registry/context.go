package registry

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ContextRange is the prompt lengths, in tokens, a worker's pod is meant
// for, as llm-d's context-length label gives them ("min-max"): from Min to
// Max, both included. The zero ContextRange is a pod without the label, or
// with one that does not parse: it takes a prompt of any length.
type ContextRange struct {
	Min, Max uint32
	// Labelled says the pod carries a range; without it Min and Max are 0
	// and mean nothing.
	Labelled bool
}

// MaxContextTokens is the largest bound a range holds: a label's larger
// number reads as it, a length no prompt reaches.
const MaxContextTokens = math.MaxInt32

// ParseContextRange reads a context-length label's value as llm-d writes
// it: two whole numbers of tokens joined by a hyphen, the first not
// greater than the second ("0-2048", "2048-8192"). Anything else is an
// error saying why; the pod then counts as unlabelled.
func ParseContextRange(value string) (ContextRange, error) {
	lo, hi, ok := strings.Cut(value, "-")
	if !ok {
		return ContextRange{}, fmt.Errorf("%q is not min-max: want two whole numbers of tokens joined by a hyphen, such as 0-2048", value)
	}
	minTokens, ok := tokenBound(lo)
	if !ok {
		return ContextRange{}, fmt.Errorf("%q: min %q is not a whole number of tokens", value, lo)
	}
	maxTokens, ok := tokenBound(hi)
	if !ok {
		return ContextRange{}, fmt.Errorf("%q: max %q is not a whole number of tokens", value, hi)
	}
	if minTokens > maxTokens {
		return ContextRange{}, fmt.Errorf("%q: min %d is greater than max %d", value, minTokens, maxTokens)
	}
	return ContextRange{Min: minTokens, Max: maxTokens, Labelled: true}, nil
}

// tokenBound reads one bound of a range, decimal digits only; a number
// past MaxContextTokens reads as it.
func tokenBound(s string) (uint32, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > MaxContextTokens {
		return MaxContextTokens, true // digits only: a number too large
	}
	return uint32(n), true
}

// Holds reports whether a prompt of tokens tokens is in the range; every
// length is in an unlabelled pod's.
func (r ContextRange) Holds(tokens int) bool {
	return !r.Labelled || tokens >= int(r.Min) && tokens <= int(r.Max)
}

// String writes the range as its label does ("0-2048"); "" for none.
func (r ContextRange) String() string {
	if !r.Labelled {
		return ""
	}
	return strconv.FormatUint(uint64(r.Min), 10) + "-" + strconv.FormatUint(uint64(r.Max), 10)
}

// pack is the range in one word, for a worker to keep atomically: the
// labelled bit, then Min, then Max (each under 2^31, as ParseContextRange
// returns them).
func (r ContextRange) pack() uint64 {
	if !r.Labelled {
		return 0
	}
	return 1<<63 | uint64(min(r.Min, MaxContextTokens))<<32 | uint64(min(r.Max, MaxContextTokens))
}

func unpackContextRange(v uint64) ContextRange {
	if v == 0 {
		return ContextRange{}
	}
	return ContextRange{Min: uint32(v>>32) & MaxContextTokens, Max: uint32(v), Labelled: true}
}

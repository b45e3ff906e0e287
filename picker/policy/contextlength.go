package policy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/inferpick/inferpick/picker/registry"
)

// DefaultContextLengthLabel is the pod label that gives the prompt lengths
// a pod is meant for, as llm-d's context-length-aware plugin reads it:
// "min-max" in tokens, such as "0-2048".
const DefaultContextLengthLabel = "llm-d.ai/context-length-range"

// ContextLengthConfig routes a request by the length of its prompt against
// the range each pod's label gives (llm-d's context-length-aware). A
// prompt's length is Request.Tokens, estimated from the text of its
// strings as llm-d estimates it without a tokenizer. A pod without the label, or with one that does not parse,
// takes any length. The weighted scorer adds weightedScorer.
// contextLengthWeight times each pod's score: above 0.3 up to 1 for a pod
// whose range holds the prompt (more for a narrower range and more room
// left above the prompt), below 0.3 for one whose range does not (more the
// nearer the prompt is to it), 0.5 without a range. The other policies
// weigh no scores: for them only the filter applies.
type ContextLengthConfig struct {
	// Label is the pod label read, llm-d.ai/context-length-range by
	// default. It is read when the pods are, at start.
	Label string `json:"label,omitempty" yaml:"label,omitempty"`
	// Filter keeps, of a request's candidates, the pods whose range holds
	// its prompt and those without a range. When that leaves none, the
	// request is refused (ErrContextLength), as llm-d's filter leaves no
	// pod to pick.
	Filter bool `json:"filter,omitempty" yaml:"filter,omitempty"`
}

var (
	// ErrContextLength reports that every live candidate that serves the
	// model and passes the label filters has a context-length range, and
	// none holds the prompt (ContextLengthConfig.Filter).
	ErrContextLength = errors.New("no candidate worker's context-length range holds the prompt")
	// ErrPromptTooLong is ErrContextLength for a prompt longer than every
	// one of those ranges.
	ErrPromptTooLong = fmt.Errorf("%w: it is longer than every one", ErrContextLength)
)

// defaultContextLength sets the label of a context-length block.
func defaultContextLength(c *ContextLengthConfig) *ContextLengthConfig {
	if c == nil {
		return nil
	}
	out := *c
	setDefault(&out.Label, DefaultContextLengthLabel)
	return &out
}

// validateContextLength checks the block's label and the weight that
// scores it.
func (c Config) validateContextLength() []error {
	w := c.WeightedScorer.ContextLengthWeight
	if !atLeast(w, 0) {
		return []error{fmt.Errorf("weightedScorer.contextLengthWeight: %v is invalid: must be a finite number ≥ 0", w)}
	}
	if c.ContextLength == nil {
		if w > 0 {
			return []error{fmt.Errorf("weightedScorer.contextLengthWeight: %v has no effect without a contextLength block, which names the pods' label", w)}
		}
		return nil
	}
	var errs []error
	for _, msg := range validation.IsQualifiedName(c.ContextLength.Label) {
		errs = append(errs, fmt.Errorf("contextLength.label: %s is invalid: %s", strconv.Quote(c.ContextLength.Label), msg))
	}
	return errs
}

// Warnings name what a defaulted, valid config asks for that has no
// effect, one sentence each.
func (c Config) Warnings() []string {
	if c.Name == WeightedScorer {
		return nil
	}
	if w := c.WeightedScorer.ContextLengthWeight; w > 0 {
		return []string{fmt.Sprintf("weightedScorer.contextLengthWeight %v has no effect with policy %s, which weighs no scores: only contextLength.filter applies", w, c.Name)}
	}
	if cl := c.ContextLength; cl != nil && !cl.Filter {
		return []string{fmt.Sprintf("contextLength without filter has no effect with policy %s, which weighs no scores: set contextLength.filter, or use weighted-scorer with a contextLengthWeight", c.Name)}
	}
	return nil
}

// inRange reports whether w's pod takes the pick's prompt, and counts the
// candidates it leaves out, and whether the prompt was shorter than one's
// range.
func (p *pick) inRange(w *registry.Worker) bool {
	r := w.ContextRange()
	if r.Holds(p.req.Tokens) {
		return true
	}
	p.outOfRange++
	p.shortOfRange = p.shortOfRange || p.req.Tokens < int(r.Min)
	return false
}

// rangeError is the error of a pick the context-length filter left no
// candidate.
func (p *pick) rangeError() error {
	if p.shortOfRange {
		return ErrContextLength
	}
	return ErrPromptTooLong
}

// The tiers of contextScore: a pod whose range holds the prompt scores
// above maxOutOfRange, one whose range does not below it, a pod without a
// range neutralScore. llm-d's numbers, so that a migrated config weighs
// them against the other scores alike.
const (
	maxOutOfRange = 0.3
	neutralRange  = 0.5
	// rangeWidthScale is the width (tokens) at which a range's width
	// score halves; rangeDistanceScale the distance (tokens) from a range
	// at which an out-of-range score halves.
	rangeWidthScale    = 10000
	rangeDistanceScale = 1000
	// rangeWidthShare is the part of an in-range score that the range's
	// narrowness makes, the rest being the room left above the prompt.
	rangeWidthShare = 0.7
)

// contextScore is how well a pod of range r suits a prompt of tokens
// tokens, in [0,1]: in range, maxOutOfRange plus the rest of the scale
// shared between a narrow range (a pod specialised for such prompts) and
// room above the prompt; out of range, up to maxOutOfRange, the nearer the
// range the more; neutralRange without a range.
func contextScore(tokens int, r registry.ContextRange) float64 {
	if !r.Labelled {
		return neutralRange
	}
	lo, hi := int(r.Min), int(r.Max)
	switch {
	case tokens >= lo && tokens <= hi:
		width := hi - lo
		if width == 0 {
			return 1
		}
		narrow := 1 / (1 + float64(width)/rangeWidthScale)
		room := float64(hi-tokens) / float64(width)
		fit := rangeWidthShare*narrow + (1-rangeWidthShare)*room
		return maxOutOfRange + (1-maxOutOfRange)*fit
	case tokens > hi:
		return maxOutOfRange / (1 + float64(tokens-hi)/rangeDistanceScale)
	default:
		return maxOutOfRange / (1 + float64(lo-tokens)/rangeDistanceScale)
	}
}

// AppendRangeKey appends to dst what sets apart, under contextLength.filter,
// the candidates a request may be picked among: the distinct context-length
// ranges that hold its prompt of the candidates the label filters keep,
// lowest first, as "min-max," each. Two requests of one model with the
// same key go to the same endpoints; a flow-control queue keys its waiters
// by it. It reports false when no kept candidate's range holds the prompt
// and every one has a range: a pick is then refused (ErrContextLength, or
// ErrLabelFilter when the filters keep none) whatever the load. Without
// the filter it appends nothing and reports true.
func (e *engine) AppendRangeKey(dst []byte, req *Request, candidates []*registry.Worker) ([]byte, bool) {
	if !e.ranged || req == nil {
		return dst, true
	}
	tokens, labels := req.Tokens, e.stageLabels(req)
	var held [8]registry.ContextRange // a pool has few distinct ranges
	rs, unranged := held[:0], false
	for _, w := range candidates {
		if labels != nil && !labels.admits(w.Labels()) {
			continue
		}
		r := w.ContextRange()
		switch {
		case !r.Labelled:
			unranged = true
		case r.Holds(tokens) && !slices.Contains(rs, r):
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b registry.ContextRange) int {
		return cmp.Or(cmp.Compare(a.Min, b.Min), cmp.Compare(a.Max, b.Max))
	})
	for _, r := range rs {
		dst = strconv.AppendUint(dst, uint64(r.Min), 10)
		dst = append(dst, '-')
		dst = strconv.AppendUint(dst, uint64(r.Max), 10)
		dst = append(dst, ',')
	}
	return dst, unranged || len(rs) > 0
}

package policy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/inferpick/inferpick/picker/registry"
)

// LabelFilter keeps, of a pick's candidates, the pods whose labels it
// selects: llm-d's by-label filter (Label, Values, AllowsNoLabel) or its
// by-label-selector (Selector), one of the two.
type LabelFilter struct {
	// Label is the pod label read. A pod is kept when its value is one of
	// Values, or, with AllowsNoLabel, when it has no such label. As
	// llm-d's filter reads it, a pod without the label has the value ""
	// for Values.
	Label         string   `json:"label,omitempty" yaml:"label,omitempty"`
	Values        []string `json:"values,omitempty" yaml:"values,omitempty"`
	AllowsNoLabel bool     `json:"allowsNoLabel,omitempty" yaml:"allowsNoLabel,omitempty"`
	// Selector keeps the pods it matches, as a Kubernetes label selector
	// does; one with neither matchLabels nor matchExpressions keeps every
	// pod.
	Selector *LabelSelector `json:"selector,omitempty" yaml:"selector,omitempty"`
}

// LabelSelector is a Kubernetes label selector (metav1.LabelSelector): every
// one of MatchLabels and MatchExpressions must hold.
type LabelSelector struct {
	MatchLabels      map[string]string  `json:"matchLabels,omitempty" yaml:"matchLabels,omitempty"`
	MatchExpressions []LabelRequirement `json:"matchExpressions,omitempty" yaml:"matchExpressions,omitempty"`
}

// LabelRequirement is one of a selector's matchExpressions: Operator In or
// NotIn with Values, Exists or DoesNotExist without.
type LabelRequirement struct {
	Key      string   `json:"key" yaml:"key"`
	Operator string   `json:"operator" yaml:"operator"`
	Values   []string `json:"values,omitempty" yaml:"values,omitempty"`
}

// ErrLabelFilter reports that the policy's label filters (Config.LabelFilters,
// or DisaggregationConfig.PrefillLabelFilters for a prefill pick) kept none
// of the live candidates that serve the model.
var ErrLabelFilter = errors.New("no candidate worker passes the policy's label filters")

// keys appends to dst the label keys f reads.
func (f LabelFilter) keys(dst []string) []string {
	if f.Selector == nil {
		return append(dst, f.Label)
	}
	for k := range f.Selector.MatchLabels {
		dst = append(dst, k)
	}
	for _, r := range f.Selector.MatchExpressions {
		dst = append(dst, r.Key)
	}
	return dst
}

// LabelKeys returns the pod labels the label filters of every stage read,
// sorted, each once: what a worker's registry.Labels hold, in that order.
// It is nil without filters.
func (c Config) LabelKeys() []string {
	var keys []string
	for _, f := range c.LabelFilters {
		keys = f.keys(keys)
	}
	if d := c.Disaggregation; d != nil {
		for _, f := range d.PrefillLabelFilters {
			keys = f.keys(keys)
		}
		for _, f := range d.EncodeLabelFilters {
			keys = f.keys(keys)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// validateLabelFilters checks each of the filters at field (Validate).
func validateLabelFilters(field string, fs []LabelFilter) []error {
	var errs []error
	for i, f := range fs {
		if err := f.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]%w", field, i, err))
		}
	}
	return errs
}

// Validate checks f as llm-d's factories do: a label named, and values or
// allowsNoLabel; or a selector that Kubernetes takes. The error starts
// with the field it is about (".label: ...", ": ..." for the filter).
func (f LabelFilter) Validate() error {
	if f.Selector != nil {
		if f.Label != "" || len(f.Values) > 0 || f.AllowsNoLabel {
			return errors.New(": give either selector or label (with values or allowsNoLabel), not both")
		}
		if _, err := metav1.LabelSelectorAsSelector(f.Selector.kube()); err != nil {
			return fmt.Errorf(".selector: %w", err)
		}
		return nil
	}
	if f.Label == "" {
		return errors.New(".label: must name a pod label (or give a selector)")
	}
	if msgs := validation.IsQualifiedName(f.Label); len(msgs) > 0 {
		return fmt.Errorf(".label: %s is invalid: %s", strconv.Quote(f.Label), strings.Join(msgs, "; "))
	}
	if len(f.Values) == 0 && !f.AllowsNoLabel {
		return errors.New(": values must list at least one value, or allowsNoLabel be true, as llm-d's by-label requires: else it keeps no pod")
	}
	return nil
}

// kube is s as Kubernetes writes it.
func (s *LabelSelector) kube() *metav1.LabelSelector {
	out := &metav1.LabelSelector{MatchLabels: s.MatchLabels}
	for _, r := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: r.Key, Operator: metav1.LabelSelectorOperator(r.Operator), Values: r.Values})
	}
	return out
}

// The tests of a labelTest on a label's value.
const (
	valueIn    uint8 = iota // the value is one of values
	valueNotIn              // the value is none of values
	valueAny                // any value (Exists)
	valueNone               // no value holds (DoesNotExist)
)

// labelTest is one test of a pod's label, the key-th of the policy's
// LabelKeys: absent is its outcome when the pod has no such label, op the
// test of the value when it has.
type labelTest struct {
	key    int
	op     uint8
	absent bool
	values []string
}

// labelMatcher keeps the workers whose labels pass every one of its
// tests: the conjunction of one stage's label filters. Nil keeps every
// worker. It is made once, at Build, and only read by the picks.
type labelMatcher []labelTest

// newLabelMatcher compiles validated filters against keys (Config.LabelKeys).
func newLabelMatcher(fs []LabelFilter, keys []string) labelMatcher {
	var m labelMatcher
	at := func(k string) int { i, _ := slices.BinarySearch(keys, k); return i }
	for _, f := range fs {
		if f.Selector == nil {
			m = append(m, labelTest{key: at(f.Label), op: valueIn, values: f.Values,
				absent: f.AllowsNoLabel || slices.Contains(f.Values, "")})
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(f.Selector.MatchLabels)) {
			m = append(m, labelTest{key: at(k), op: valueIn, values: []string{f.Selector.MatchLabels[k]}})
		}
		for _, r := range f.Selector.MatchExpressions {
			t := labelTest{key: at(r.Key), values: r.Values}
			switch metav1.LabelSelectorOperator(r.Operator) {
			case metav1.LabelSelectorOpIn:
				t.op = valueIn
			case metav1.LabelSelectorOpNotIn:
				t.op, t.absent = valueNotIn, true
			case metav1.LabelSelectorOpExists:
				t.op = valueAny
			case metav1.LabelSelectorOpDoesNotExist:
				t.op, t.absent = valueNone, true
			}
			m = append(m, t)
		}
	}
	return m
}

// admits reports whether labels pass every test. It allocates nothing.
func (m labelMatcher) admits(labels registry.Labels) bool {
	for i := range m {
		t := &m[i]
		v, ok := labels.Value(t.key)
		if !ok {
			if !t.absent {
				return false
			}
			continue
		}
		switch t.op {
		case valueIn:
			if !slices.Contains(t.values, v) {
				return false
			}
		case valueNotIn:
			if slices.Contains(t.values, v) {
				return false
			}
		case valueNone:
			return false
		}
	}
	return true
}

// LabelFilter returns what Config.LabelFilters keep: whether a worker's
// pod passes them, as a request's pick judges it; nil without filters. It
// compiles them once, for a caller that asks of many workers.
func (c Config) LabelFilter() func(w *registry.Worker) bool { return c.workerTest(c.LabelFilters) }

// EncodeLabelFilter returns the encode stage's label filters
// (DisaggregationConfig.EncodeLabelFilters) as a test of a worker, nil
// when there are none.
func (c Config) EncodeLabelFilter() func(w *registry.Worker) bool {
	if c.Disaggregation == nil {
		return nil
	}
	return c.workerTest(c.Disaggregation.EncodeLabelFilters)
}

// workerTest compiles fs, filters of one of c's stages, once into a test
// of a worker's labels; nil when fs is empty.
func (c Config) workerTest(fs []LabelFilter) func(w *registry.Worker) bool {
	if len(fs) == 0 {
		return nil
	}
	m := newLabelMatcher(fs, c.LabelKeys())
	return func(w *registry.Worker) bool { return m.admits(w.Labels()) }
}

// labelled reports whether w passes the label filters of the pick's
// stage, and counts it when it does not.
func (p *pick) labelled(m labelMatcher, w *registry.Worker) bool {
	if m.admits(w.Labels()) {
		return true
	}
	p.unlabelled++
	return false
}

package fileconfig

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/policy"
)

// contextLengthAware is llm-d's scorer (and, with enableFiltering, filter)
// of the pods by the context-length range their label gives: the policy's
// contextLength, its profile weight the weighted scorer's
// contextLengthWeight.
const contextLengthAware = "context-length-aware"

// readContextLength checks context-length-aware's parameters: label (llm-d
// refuses an empty one) and enableFiltering. llm-d reads no others.
func (u *upstream) readContextLength(p plugin) error {
	_, inert, err := contextLengthParams(p)
	if err != nil {
		return err
	}
	for _, name := range inert {
		u.warn(fmt.Sprintf("%s parameter %s has no effect: it takes label and enableFiltering", contextLengthAware, name))
	}
	return nil
}

// contextLengthParams reads context-length-aware's parameters into the
// policy's block, with the names of those it does not take.
func contextLengthParams(p plugin) (policy.ContextLengthConfig, []string, error) {
	c := policy.ContextLengthConfig{Label: policy.DefaultContextLengthLabel}
	var inert []string
	for i := 0; p.params != nil && i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		switch k.Value {
		case "label":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				return c, nil, fmt.Errorf("line %d: %s label must name a pod label, as llm-d requires", v.Line, contextLengthAware)
			}
			c.Label = v.Value
		case "enableFiltering":
			on, err := boolean(contextLengthAware+" enableFiltering", v)
			if err != nil {
				return c, nil, err
			}
			c.Filter = on
		default:
			inert = append(inert, k.Value)
		}
	}
	return c, inert, nil
}

// contextLength sets the policy's contextLength from the profile's
// context-length-aware plugins, named: their label, which must be one, and
// their filter, on when one filters. Beside precise-prefix-cache-scorer
// the policy weighs no scores, and only the filter is kept.
func (u *upstream) contextLength(names []string, cacheAware, tokenizer bool) error {
	if len(names) == 0 {
		return nil
	}
	var out policy.ContextLengthConfig
	for i, name := range names {
		c, _, err := contextLengthParams(u.plugins[name])
		if err != nil {
			return err
		}
		if i > 0 && c.Label != out.Label {
			return fmt.Errorf("%s plugins %q and %q read different labels (%s, %s): the picker reads one context-length label; keep one plugin", contextLengthAware, names[0], name, out.Label, c.Label)
		}
		out.Label, out.Filter = c.Label, out.Filter || c.Filter
	}
	if cacheAware && !out.Filter {
		u.warn(fmt.Sprintf("%s has no effect beside precise-prefix-cache-scorer without enableFiltering: the cache-aware policy weighs no scores", contextLengthAware))
		return nil
	}
	if tokenizer {
		u.warn(fmt.Sprintf("%s judges a prompt's length as its text's bytes over 4, not by the tokenizer's count: a prompt near a range's bound may be taken for the pods on its other side", contextLengthAware))
	}
	u.out.Policy.ContextLength = &out
	return nil
}

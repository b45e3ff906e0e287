package fileconfig

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/attrexpr"
)

// readAttributes reads the native document's attributes: a list of
// {namespace, name, expression, condition}, each checked as a
// request-attribute-reporter's attribute is (namespace envoy.lb when
// omitted or null, no condition when omitted or null), no two with one
// key. Errors name the item, as attributes[i], and the line.
func readAttributes(list *yaml.Node) ([]attrexpr.Attribute, error) {
	if list.Kind == 0 || isNull(list) {
		return nil, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: attributes must be a list of namespace, name, expression and condition", list.Line)
	}
	var out []attrexpr.Attribute
	keys := attrKeys{}
	for i, item := range list.Content {
		what := fmt.Sprintf("attributes[%d]", i)
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: %s must be a mapping of namespace, name, expression and condition", item.Line, what)
		}
		var ns, name, expr, cond string
		exprLine, condLine := item.Line, item.Line
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], item.Content[j+1]
			var s *string
			switch k.Value {
			case "namespace":
				s = &ns
			case "name":
				s = &name
			case "expression":
				s, exprLine = &expr, v.Line
			case "condition":
				s, condLine = &cond, v.Line
			default:
				return nil, fmt.Errorf("line %d: unknown %s field %q: it takes namespace, name, expression and condition", k.Line, what, k.Value)
			}
			if err := reporterString(s, what+" "+k.Value, v); err != nil {
				return nil, err
			}
		}
		if name == "" {
			return nil, fmt.Errorf("line %d: %s name is empty", item.Line, what)
		}
		a, err := checkedAttribute(what, ns, name, expr, cond, exprLine, condLine)
		if err != nil {
			return nil, err
		}
		if err := keys.add(what, a, item.Line); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// attrKeys holds the line of each attribute key read so far, so that a key
// given twice is refused: the gateway receives one value per key, and
// which of two upstream would report depends on the order it happens to
// run its plugins in.
type attrKeys map[[2]string]int

// add records a's key at line, or says which line already gave it; what
// names the attribute (attributes[1], or the plugin type).
func (k attrKeys) add(what string, a attrexpr.Attribute, line int) error {
	key := [2]string{a.Namespace, a.Name}
	if prev, ok := k[key]; ok {
		return fmt.Errorf("line %d: %s reports %s/%s, as line %d already does: the gateway receives one value per key; merge the two into one expression (condition ? value : other) or rename one", line, what, a.Namespace, a.Name, prev)
	}
	k[key] = line
	return nil
}

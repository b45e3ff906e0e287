package fileconfig

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/attrexpr"
)

// readAttributes reads the native document's attributes: a list of
// {namespace, name, expression, condition}, each checked as a
// request-attribute-reporter's attribute is (namespace envoy.lb when
// omitted or null, no condition when omitted or null). Errors name the
// item, as attributes[i], and the line.
func readAttributes(list *yaml.Node) ([]attrexpr.Attribute, error) {
	if list.Kind == 0 || isNull(list) {
		return nil, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: attributes must be a list of namespace, name, expression and condition", list.Line)
	}
	var out []attrexpr.Attribute
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
		out = append(out, a)
	}
	return out, nil
}

package fileconfig

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/attrexpr"
)

// attributeReporter is upstream's plugin that reports a value computed from
// each response's token usage to the gateway as dynamic metadata.
const attributeReporter = "request-attribute-reporter"

// readReporter reads a request-attribute-reporter's attributes: as
// upstream, exactly one, whose key.namespace defaults to envoy.lb; its
// expression and condition are checked here (package attrexpr), so that a
// construct the picker does not evaluate is refused at load.
func (u *upstream) readReporter(p plugin) error {
	var list *yaml.Node
	if p.params != nil {
		for i := 0; i+1 < len(p.params.Content); i += 2 {
			k, v := p.params.Content[i], p.params.Content[i+1]
			if k.Value != "attributes" {
				return fmt.Errorf("line %d: unknown %s parameter %q: it takes attributes", k.Line, attributeReporter, k.Value)
			}
			list = v
		}
	}
	if list == nil || list.Kind != yaml.SequenceNode || len(list.Content) != 1 {
		line := p.line
		if list != nil {
			line = list.Line
		}
		return fmt.Errorf("line %d: %s attributes must list exactly one attribute, as upstream's does: give each attribute a plugin of its own", line, attributeReporter)
	}
	item := list.Content[0]
	if item.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a %s attribute must be a mapping of key, expression and condition", item.Line, attributeReporter)
	}
	var ns, name, expr, cond string
	exprLine, condLine := item.Line, item.Line
	for i := 0; i+1 < len(item.Content); i += 2 {
		k, v := item.Content[i], item.Content[i+1]
		switch k.Value {
		case "key":
			if v.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: %s key must be a mapping of namespace and name", v.Line, attributeReporter)
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				switch kk, vv := v.Content[j], v.Content[j+1]; kk.Value {
				case "namespace":
					ns = vv.Value
				case "name":
					name = vv.Value
				default:
					return fmt.Errorf("line %d: unknown %s key field %q: it takes namespace and name", kk.Line, attributeReporter, kk.Value)
				}
			}
		case "expression":
			expr, exprLine = v.Value, v.Line
		case "condition":
			cond, condLine = v.Value, v.Line
		default:
			return fmt.Errorf("line %d: unknown %s attribute field %q: it takes key, expression and condition", k.Line, attributeReporter, k.Value)
		}
	}
	// The expression is checked alone first, so that an error names the
	// line of the part it is about.
	a, err := attrexpr.NewAttribute(ns, name, expr, "")
	if err != nil {
		return fmt.Errorf("line %d: %s %w", exprLine, attributeReporter, err)
	}
	if cond != "" {
		c, err := attrexpr.NewAttribute(ns, name, expr, cond)
		if err != nil {
			return fmt.Errorf("line %d: %s %w", condLine, attributeReporter, err)
		}
		a = c
	}
	u.out.Attributes = append(u.out.Attributes, a)
	return nil
}

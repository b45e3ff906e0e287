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
// construct the picker does not evaluate is refused at load, and so is a
// key another reporter already gives.
func (u *upstream) readReporter(p plugin) error {
	var list *yaml.Node
	if p.params != nil {
		for i := 0; i+1 < len(p.params.Content); i += 2 {
			k, v := p.params.Content[i], p.params.Content[i+1]
			if k.Value != "attributes" {
				return fmt.Errorf("line %d: unknown %s parameter %q: it takes attributes", k.Line, attributeReporter, k.Value)
			}
			if list != nil {
				return fmt.Errorf("line %d: %s attributes is given twice", k.Line, attributeReporter)
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
				kk, vv := v.Content[j], v.Content[j+1]
				var s *string
				switch kk.Value {
				case "namespace":
					s = &ns
				case "name":
					s = &name
				default:
					return fmt.Errorf("line %d: unknown %s key field %q: it takes namespace and name", kk.Line, attributeReporter, kk.Value)
				}
				if err := reporterString(s, attributeReporter+" key."+kk.Value, vv); err != nil {
					return err
				}
			}
		case "expression", "condition":
			s := &expr
			if k.Value == "condition" {
				s, condLine = &cond, v.Line
			} else {
				exprLine = v.Line
			}
			if err := reporterString(s, attributeReporter+" "+k.Value, v); err != nil {
				return err
			}
		default:
			return fmt.Errorf("line %d: unknown %s attribute field %q: it takes key, expression and condition", k.Line, attributeReporter, k.Value)
		}
	}
	a, err := checkedAttribute(attributeReporter, ns, name, expr, cond, exprLine, condLine)
	if err != nil {
		return err
	}
	if u.attrKeys == nil {
		u.attrKeys = attrKeys{}
	}
	if err := u.attrKeys.add(attributeReporter, a, item.Line); err != nil {
		return err
	}
	u.out.Attributes = append(u.out.Attributes, a)
	return nil
}

// checkedAttribute builds an attribute (package attrexpr), its errors
// prefixed with what (the plugin or item it is read from) and the line of
// the expression or the condition they are about.
func checkedAttribute(what, ns, name, expr, cond string, exprLine, condLine int) (attrexpr.Attribute, error) {
	// The expression is checked alone first, so that an error names the
	// line of the part it is about.
	a, err := attrexpr.NewAttribute(ns, name, expr, "")
	if err != nil {
		return a, fmt.Errorf("line %d: %s %w", exprLine, what, err)
	}
	if cond != "" {
		if a, err = attrexpr.NewAttribute(ns, name, expr, cond); err != nil {
			return a, fmt.Errorf("line %d: %s %w", condLine, what, err)
		}
	}
	return a, nil
}

// reporterString reads a string field of an attribute, named by field in
// errors, into s: a YAML null is "", as upstream reads it (so a null
// namespace is envoy.lb and a null condition none).
func reporterString(s *string, field string, v *yaml.Node) error {
	switch {
	case isNull(v):
		*s = ""
	case v.Kind != yaml.ScalarNode:
		return fmt.Errorf("line %d: %s must be a string", v.Line, field)
	default:
		*s = v.Value
	}
	return nil
}

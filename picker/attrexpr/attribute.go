package attrexpr

import (
	"errors"
	"fmt"
)

// DefaultNamespace is the dynamic metadata namespace of an attribute that
// names none, upstream's.
const DefaultNamespace = "envoy.lb"

// Attribute is a value reported to the gateway for each response, as
// dynamic metadata: Namespace → Name → Expression's value, when Condition
// (if any) holds.
type Attribute struct {
	Namespace string
	Name      string
	// Expression is the value: a whole number.
	Expression *Expr
	// Condition, when set, must hold for the value to be reported.
	Condition *Expr
}

// NewAttribute parses an attribute's expression and condition (condition
// may be ""); an empty namespace is DefaultNamespace. Errors say which of
// the two they are about.
func NewAttribute(namespace, name, expression, condition string) (Attribute, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	a := Attribute{Namespace: namespace, Name: name}
	if name == "" {
		return a, errors.New("key.name is empty")
	}
	if expression == "" {
		return a, errors.New("expression is empty")
	}
	var err error
	if a.Expression, err = Parse(expression); err != nil {
		return a, fmt.Errorf("expression: %w", err)
	}
	if a.Expression.typ == tyBool {
		return a, errors.New("expression: its value is a bool: the expression must give a number")
	}
	if condition != "" {
		if a.Condition, err = Parse(condition); err != nil {
			return a, fmt.Errorf("condition: %w", err)
		}
		if t := a.Condition.typ; t != tyBool && t != tyDyn {
			return a, fmt.Errorf("condition: its value is %s: the condition must give a bool", typNames[t])
		}
	}
	return a, nil
}

// Report evaluates the attribute over a response's usage. It reports the
// value and true when the condition holds and the value is not 0 (upstream
// reports no 0); false with a nil error when the condition does not hold
// or gives no bool (upstream skips both alike) or the value is 0; and the
// evaluation's error otherwise (such as a division by zero), when nothing
// is reported either.
func (a *Attribute) Report(u *Usage) (int64, bool, error) {
	if a.Condition != nil {
		ok, err := a.Condition.Bool(u)
		if errors.Is(err, ErrNotBoolean) || err == nil && !ok {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, err
		}
	}
	v, err := a.Expression.Int(u)
	if err != nil || v == 0 {
		return 0, false, err
	}
	return v, true, nil
}

package attrexpr

import (
	"errors"
	"math"
)

// Usage is the token counts of one response, as upstream's usage object
// holds them: 0 for a count the model server did not report.
type Usage [numFields]int64

// Errors of evaluation, as CEL names them. None is allocated per response.
var (
	ErrNoOverload = errors.New("no such overload")
	// ErrMixed is ErrNoOverload between an int and a double.
	ErrMixed       = errors.New("no such overload: int and double do not mix (the usage fields are doubles: write 2.0, not 2)")
	ErrDivByZero   = errors.New("division by zero")
	ErrModByZero   = errors.New("modulus by zero")
	ErrOverflow    = errors.New("integer overflow")
	ErrNaNOrdered  = errors.New("NaN values cannot be ordered")
	ErrNotNumber   = errors.New("the expression's value is not a number")
	ErrNotWhole    = errors.New("the expression's value does not fit a 64-bit integer")
	ErrNotBoolean  = errors.New("the condition's value is not a boolean")
	errNeverHappen = errors.New("unknown operation")
)

type kind uint8

const (
	kInt kind = iota
	kDouble
	kBool
)

type value struct {
	k kind
	i int64 // an int, or a bool (0, 1)
	f float64
}

func boolean(b bool) value {
	if b {
		return value{k: kBool, i: 1}
	}
	return value{k: kBool}
}

func (v value) num() float64 {
	if v.k == kDouble {
		return v.f
	}
	return float64(v.i)
}

// Int evaluates e over u to a whole number: an int as it is, a double
// truncated toward zero (as upstream converts it). A double that is not
// finite or does not fit, or a bool, is an error.
func (e *Expr) Int(u *Usage) (int64, error) {
	v, err := e.eval(e.root, u)
	switch {
	case err != nil:
		return 0, err
	case v.k == kInt:
		return v.i, nil
	case v.k == kBool:
		return 0, ErrNotNumber
	case math.IsNaN(v.f) || v.f >= 0x1p63 || v.f < -0x1p63:
		return 0, ErrNotWhole
	}
	return int64(v.f), nil
}

// Bool evaluates e over u to a boolean.
func (e *Expr) Bool(u *Usage) (bool, error) {
	v, err := e.eval(e.root, u)
	if err != nil {
		return false, err
	}
	if v.k != kBool {
		return false, ErrNotBoolean
	}
	return v.i != 0, nil
}

func (e *Expr) eval(at int32, u *Usage) (value, error) {
	n := &e.nodes[at]
	switch n.op {
	case opInt:
		return value{k: kInt, i: n.i}, nil
	case opDouble:
		return value{k: kDouble, f: n.f}, nil
	case opBool:
		return value{k: kBool, i: n.i}, nil
	case opField:
		return value{k: kDouble, f: float64(u[n.field])}, nil
	case opHas:
		return boolean(true), nil // upstream's usage always holds its three counts
	case opAnd, opOr:
		return e.logical(n, u)
	case opCond:
		c, err := e.eval(n.a, u)
		if err != nil {
			return value{}, err
		}
		if c.k != kBool {
			return value{}, ErrNoOverload
		}
		if c.i != 0 {
			return e.eval(n.b, u)
		}
		return e.eval(n.c, u)
	}
	a, err := e.eval(n.a, u)
	if err != nil {
		return value{}, err
	}
	switch n.op {
	case opNot:
		if a.k != kBool {
			return value{}, ErrNoOverload
		}
		return boolean(a.i == 0), nil
	case opNeg:
		switch a.k {
		case kInt:
			if a.i == math.MinInt64 {
				return value{}, ErrOverflow
			}
			return value{k: kInt, i: -a.i}, nil
		case kDouble:
			return value{k: kDouble, f: -a.f}, nil
		}
		return value{}, ErrNoOverload
	}
	b, err := e.eval(n.b, u)
	if err != nil {
		return value{}, err
	}
	switch n.op {
	case opEq, opNe:
		eq := equal(a, b)
		return boolean(eq == (n.op == opEq)), nil
	case opLt, opLe, opGt, opGe:
		return compare(n.op, a, b)
	}
	return arith(n.op, a, b)
}

// logical is && and || as CEL has them: commutative, so that a side that
// decides the result wins over an error or a non-bool on the other.
func (e *Expr) logical(n *node, u *Usage) (value, error) {
	decides := int64(0) // false decides &&
	if n.op == opOr {
		decides = 1
	}
	a, errA := e.eval(n.a, u)
	if errA == nil && a.k == kBool && a.i == decides {
		return a, nil
	}
	b, errB := e.eval(n.b, u)
	if errB == nil && b.k == kBool && b.i == decides {
		return b, nil
	}
	switch {
	case errA != nil:
		return value{}, errA
	case a.k != kBool:
		return value{}, ErrNoOverload
	case errB != nil:
		return value{}, errB
	case b.k != kBool:
		return value{}, ErrNoOverload
	}
	return boolean(decides == 0), nil
}

// equal is CEL's equality: numbers of either kind by value, a bool only
// to a bool.
func equal(a, b value) bool {
	if (a.k == kBool) != (b.k == kBool) {
		return false
	}
	if a.k == kInt && b.k == kInt || a.k == kBool {
		return a.i == b.i
	}
	return cmpNum(a, b) == 0 && !math.IsNaN(a.num()) && !math.IsNaN(b.num())
}

func compare(o op, a, b value) (value, error) {
	var c int
	switch {
	case a.k == kBool && b.k == kBool:
		c = int(a.i - b.i)
	case a.k == kBool || b.k == kBool:
		return value{}, ErrNoOverload
	case a.k == kDouble && math.IsNaN(a.f) || b.k == kDouble && math.IsNaN(b.f):
		return value{}, ErrNaNOrdered
	default:
		c = cmpNum(a, b)
	}
	switch o {
	case opLt:
		return boolean(c < 0), nil
	case opLe:
		return boolean(c <= 0), nil
	case opGt:
		return boolean(c > 0), nil
	}
	return boolean(c >= 0), nil
}

// cmpNum orders two numbers, exactly across kinds.
func cmpNum(a, b value) int {
	if a.k == kInt && b.k == kInt {
		return cmpOrdered(a.i, b.i)
	}
	if a.k == kDouble && b.k == kDouble {
		return cmpOrdered(a.f, b.f)
	}
	if a.k == kInt {
		return -cmpDoubleInt(b.f, a.i)
	}
	return cmpDoubleInt(a.f, b.i)
}

// cmpDoubleInt orders a double and an int without losing the int's
// precision to a conversion.
func cmpDoubleInt(d float64, i int64) int {
	switch {
	case d < -0x1p63:
		return -1
	case d >= 0x1p63:
		return 1
	}
	t := math.Trunc(d)
	if c := cmpOrdered(int64(t), i); c != 0 {
		return c
	}
	return cmpOrdered(d, t)
}

func cmpOrdered[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func arith(o op, a, b value) (value, error) {
	switch {
	case a.k == kBool || b.k == kBool:
		return value{}, ErrNoOverload
	case a.k != b.k:
		return value{}, ErrMixed
	case a.k == kDouble:
		switch o {
		case opAdd:
			return value{k: kDouble, f: a.f + b.f}, nil
		case opSub:
			return value{k: kDouble, f: a.f - b.f}, nil
		case opMul:
			return value{k: kDouble, f: a.f * b.f}, nil
		case opDiv:
			return value{k: kDouble, f: a.f / b.f}, nil
		}
		return value{}, ErrNoOverload // no % of doubles
	}
	x, y := a.i, b.i
	var r int64
	switch o {
	case opAdd:
		r = x + y
		if (r > x) != (y > 0) {
			return value{}, ErrOverflow
		}
	case opSub:
		r = x - y
		if (r < x) != (y > 0) {
			return value{}, ErrOverflow
		}
	case opMul:
		if x != 0 && y != 0 {
			r = x * y
			if r/y != x || x == -1 && y == math.MinInt64 || y == -1 && x == math.MinInt64 {
				return value{}, ErrOverflow
			}
		}
	case opDiv, opMod:
		if y == 0 {
			if o == opDiv {
				return value{}, ErrDivByZero
			}
			return value{}, ErrModByZero
		}
		if x == math.MinInt64 && y == -1 {
			return value{}, ErrOverflow
		}
		if o == opDiv {
			r = x / y
		} else {
			r = x % y
		}
	default:
		return value{}, errNeverHappen
	}
	return value{k: kInt, i: r}, nil
}

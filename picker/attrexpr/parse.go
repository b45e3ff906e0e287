package attrexpr

import (
	"fmt"
	"strconv"
)

// Field is a usage field an expression reads.
type Field uint8

// The fields of upstream's usage object.
const (
	PromptTokens Field = iota
	CompletionTokens
	TotalTokens
	numFields
)

var fieldNames = [numFields]string{"prompt_tokens", "completion_tokens", "total_tokens"}

type op uint8

const (
	opInt op = iota
	opDouble
	opBool
	opField
	opHas
	opNeg
	opNot
	opAdd
	opSub
	opMul
	opDiv
	opMod
	opLt
	opLe
	opGt
	opGe
	opEq
	opNe
	opAnd
	opOr
	opCond
)

var binaryOps = map[string]op{
	"+": opAdd, "-": opSub, "*": opMul, "/": opDiv, "%": opMod,
	"<": opLt, "<=": opLe, ">": opGt, ">=": opGe, "==": opEq, "!=": opNe,
}

// typ is what the checker knows of a value's kind. dyn is known only when
// evaluated. field is a field's, or arithmetic's over fields alone: dyn
// to CEL's checker, as in upstream's environment, but a double whenever
// evaluated, so that it is a double to arithmetic, !, && and || and the
// condition of c ? a : b (which would fail on every response), and dyn to
// comparisons and to the branches of c ? a : b.
type typ uint8

const (
	tyDyn typ = iota
	tyInt
	tyDouble
	tyBool
	tyField
)

var typNames = [...]string{"dyn", "int", "double", "bool", "double"}

// mixedHint follows an error about an int and a double in arithmetic.
const mixedHint = ": int and double do not mix (the usage fields are doubles: write 2.0, not 2)"

type node struct {
	op      op
	field   Field
	a, b, c int32 // operands, indexes in Expr.nodes
	i       int64 // opInt's value; opBool's (0, 1)
	f       float64
}

// Expr is a checked expression, ready to evaluate.
type Expr struct {
	src   string
	nodes []node
	root  int32
	typ   typ
}

// String returns the expression's source.
func (e *Expr) String() string { return e.src }

const (
	// maxNodes bounds an expression's size; configurations write a few.
	maxNodes = 1000
	// maxDepth bounds the nesting of parentheses, unary operators and
	// conditionals.
	maxDepth = 100
)

type parser struct {
	src   string
	toks  []token
	pos   int
	depth int
	nodes []node
	types []typ
}

// Parse reads and checks src. The error names the column (and the line of
// a multi-line expression) and, for a construct that is not supported,
// what is.
func Parse(src string) (*Expr, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{src: src, toks: toks}
	if toks[0].kind == tEOF {
		return nil, fmt.Errorf("the expression is empty")
	}
	root, err := p.expr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, p.unexpected(t)
	}
	return &Expr{src: src, nodes: p.nodes, root: root, typ: p.types[root]}, nil
}

func (p *parser) peek() token { return p.toks[p.pos] }

func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tEOF {
		p.pos++
	}
	return t
}

func (p *parser) isOp(s string) bool {
	t := p.peek()
	return t.kind == tOp && t.text == s
}

func (p *parser) unexpected(t token) error {
	if t.kind == tEOF {
		return errorAt(p.src, t.pos, "unexpected end of the expression")
	}
	return errorAt(p.src, t.pos, fmt.Sprintf("unexpected %q", t.text))
}

func (p *parser) add(n node, t typ, pos int) (int32, error) {
	if len(p.nodes) == maxNodes {
		return 0, errorAt(p.src, pos, fmt.Sprintf("the expression is too long (over %d terms)", maxNodes))
	}
	p.nodes = append(p.nodes, n)
	p.types = append(p.types, t)
	return int32(len(p.nodes) - 1), nil
}

func (p *parser) enter(pos int) error {
	p.depth++
	if p.depth > maxDepth {
		return errorAt(p.src, pos, fmt.Sprintf("the expression nests deeper than %d", maxDepth))
	}
	return nil
}

// expr is a conditional: or ['?' or ':' expr].
func (p *parser) expr() (int32, error) {
	if err := p.enter(p.peek().pos); err != nil {
		return 0, err
	}
	defer func() { p.depth-- }()
	c, err := p.binary(0)
	if err != nil || !p.isOp("?") {
		return c, err
	}
	q := p.next()
	a, err := p.binary(0)
	if err != nil {
		return 0, err
	}
	if !p.isOp(":") {
		return 0, p.unexpected(p.peek())
	}
	p.next()
	b, err := p.expr()
	if err != nil {
		return 0, err
	}
	ct, at, bt := p.types[c], p.types[a], p.types[b]
	dyn := func(t typ) bool { return t == tyDyn || t == tyField }
	if ct != tyBool && ct != tyDyn || at != bt && !dyn(at) && !dyn(bt) {
		return 0, errorAt(p.src, q.pos, fmt.Sprintf("no matching overload for c ? a : b applied to (%s, %s, %s)", typNames[ct], typNames[at], typNames[bt]))
	}
	t := at
	if at != bt {
		t = tyDyn
	}
	return p.add(node{op: opCond, a: c, b: a, c: b}, t, q.pos)
}

// levels are the binary operators by precedence, lowest first.
var levels = [][]string{{"||"}, {"&&"}, {"<", "<=", ">", ">=", "==", "!="}, {"+", "-"}, {"*", "/", "%"}}

// binary reads a left-associative chain of the operators of level and
// above.
func (p *parser) binary(level int) (int32, error) {
	if level == len(levels) {
		return p.unary()
	}
	l, err := p.binary(level + 1)
	if err != nil {
		return 0, err
	}
	for {
		t := p.peek()
		if t.kind != tOp || !contains(levels[level], t.text) {
			return l, nil
		}
		p.next()
		r, err := p.binary(level + 1)
		if err != nil {
			return 0, err
		}
		if l, err = p.combine(t, l, r); err != nil {
			return 0, err
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// combine makes the node of a binary operator, checking its operands'
// kinds as CEL's checker does: where both are known they must fit.
func (p *parser) combine(t token, l, r int32) (int32, error) {
	lt, rt := p.types[l], p.types[r]
	bad := func() (int32, error) {
		return 0, errorAt(p.src, t.pos, fmt.Sprintf("no matching overload for %s applied to (%s, %s)", t.text, typNames[lt], typNames[rt]))
	}
	switch t.text {
	case "&&", "||":
		if lt != tyBool && lt != tyDyn || rt != tyBool && rt != tyDyn {
			return bad()
		}
		o := opAnd
		if t.text == "||" {
			o = opOr
		}
		return p.add(node{op: o, a: l, b: r}, tyBool, t.pos)
	case "==", "!=", "<", "<=", ">", ">=":
		// Numbers of either kind compare at run time; literals of two
		// kinds do not pass CEL's checker.
		if lt != tyDyn && lt != tyField && rt != tyDyn && rt != tyField && lt != rt {
			return bad()
		}
		return p.add(node{op: binaryOps[t.text], a: l, b: r}, tyBool, t.pos)
	}
	// A field is a double to arithmetic.
	ld, rd := lt, rt
	if ld == tyField {
		ld = tyDouble
	}
	if rd == tyField {
		rd = tyDouble
	}
	switch {
	case ld == tyBool || rd == tyBool || t.text == "%" && (ld == tyDouble || rd == tyDouble):
		return bad()
	case ld != tyDyn && rd != tyDyn && ld != rd:
		return 0, errorAt(p.src, t.pos, fmt.Sprintf("no matching overload for %s applied to (%s, %s)%s", t.text, typNames[lt], typNames[rt], mixedHint))
	}
	res := lt
	if lt == tyDyn || lt == tyField && rt != tyDyn {
		res = rt
	}
	return p.add(node{op: binaryOps[t.text], a: l, b: r}, res, t.pos)
}

// unary is a member after a run of '!' or of '-', as CEL's grammar has it:
// an even run is dropped and an odd one is one operator; a '!' run may be
// followed by a negative number, but no run by the other operator; a
// single '-' before a number is its sign.
func (p *parser) unary() (int32, error) {
	t := p.peek()
	if t.kind != tOp || t.text != "-" && t.text != "!" {
		return p.primary()
	}
	if t.text == "-" && isNumber(p.toks[p.pos+1]) {
		return p.signed()
	}
	n := 0
	for p.isOp(t.text) {
		p.next()
		n++
	}
	var x int32
	var err error
	switch {
	case p.isOp("!") || p.isOp("-") && !isNumber(p.toks[p.pos+1]):
		return 0, p.unexpected(p.peek())
	case p.isOp("-"):
		x, err = p.signed()
	default:
		x, err = p.primary()
	}
	if err != nil || n%2 == 0 {
		return x, err
	}
	xt := p.types[x]
	if t.text == "!" {
		if xt != tyBool && xt != tyDyn {
			return 0, errorAt(p.src, t.pos, fmt.Sprintf("no matching overload for ! applied to (%s)", typNames[xt]))
		}
		return p.add(node{op: opNot, a: x}, tyBool, t.pos)
	}
	if xt == tyBool {
		return 0, errorAt(p.src, t.pos, "no matching overload for - applied to (bool)")
	}
	return p.add(node{op: opNeg, a: x}, xt, t.pos)
}

func isNumber(t token) bool { return t.kind == tInt || t.kind == tDouble }

// signed is a number literal with its '-' sign, so that the smallest int
// is one.
func (p *parser) signed() (int32, error) {
	minus, lit := p.next(), p.next()
	if lit.kind == tDouble {
		v, err := strconv.ParseFloat("-"+lit.text, 64)
		if err != nil {
			return 0, errorAt(p.src, minus.pos, "double literal out of range")
		}
		return p.add(node{op: opDouble, f: v}, tyDouble, minus.pos)
	}
	v, err := parseInt(lit.text, true)
	if err != nil {
		return 0, errorAt(p.src, minus.pos, "integer literal out of range")
	}
	return p.add(node{op: opInt, i: v}, tyInt, minus.pos)
}

// primary is a literal, a field, has(field) or a parenthesized expression.
func (p *parser) primary() (int32, error) {
	t := p.next()
	switch t.kind {
	case tInt:
		v, err := parseInt(t.text, false)
		if err != nil {
			return 0, errorAt(p.src, t.pos, "integer literal out of range")
		}
		return p.add(node{op: opInt, i: v}, tyInt, t.pos)
	case tDouble:
		v, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			return 0, errorAt(p.src, t.pos, "double literal out of range")
		}
		return p.add(node{op: opDouble, f: v}, tyDouble, t.pos)
	case tOp:
		if t.text != "(" {
			return 0, p.unexpected(t)
		}
		x, err := p.expr()
		if err != nil {
			return 0, err
		}
		if !p.isOp(")") {
			return 0, p.unexpected(p.peek())
		}
		p.next()
		return x, nil
	case tIdent:
		return p.ident(t)
	}
	return 0, p.unexpected(t)
}

func (p *parser) ident(t token) (int32, error) {
	if p.isOp("(") {
		if t.text != "has" {
			return 0, errorAt(p.src, t.pos, fmt.Sprintf("function %s() is not supported: %s", t.text, supported))
		}
		p.next()
		f, err := p.field(p.next())
		if err != nil {
			return 0, err
		}
		if !p.isOp(")") {
			return 0, errorAt(p.src, p.peek().pos, "has() takes one field, such as has(usage.completion_tokens)")
		}
		p.next()
		return p.add(node{op: opHas, field: f}, tyBool, t.pos)
	}
	switch t.text {
	case "true", "false":
		v := int64(0)
		if t.text == "true" {
			v = 1
		}
		return p.add(node{op: opBool, i: v}, tyBool, t.pos)
	case "usage":
		f, err := p.field(t)
		if err != nil {
			return 0, err
		}
		return p.add(node{op: opField, field: f}, tyField, t.pos)
	case "null":
		return 0, errorAt(p.src, t.pos, "null is not supported: "+supported)
	}
	return 0, errorAt(p.src, t.pos, fmt.Sprintf("unknown name %s: %s", t.text, supported))
}

// field reads usage.<field>, t being the token usage.
func (p *parser) field(t token) (Field, error) {
	if t.kind != tIdent || t.text != "usage" || !p.isOp(".") {
		return 0, errorAt(p.src, t.pos, "expected a field such as usage.completion_tokens")
	}
	p.next()
	name := p.next()
	if name.kind != tIdent {
		return 0, p.unexpected(name)
	}
	f := Field(0)
	for f < numFields && fieldNames[f] != name.text {
		f++
	}
	if f == numFields {
		return 0, errorAt(p.src, name.pos, fmt.Sprintf("unknown field usage.%s: the fields are usage.prompt_tokens, usage.completion_tokens and usage.total_tokens", name.text))
	}
	if p.isOp(".") {
		return 0, errorAt(p.src, p.peek().pos, fmt.Sprintf("usage.%s is a number: it has no fields or methods", name.text))
	}
	if p.isOp("(") {
		return 0, errorAt(p.src, name.pos, fmt.Sprintf("function %s() is not supported: %s", name.text, supported))
	}
	return f, nil
}

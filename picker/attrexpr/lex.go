// Package attrexpr reads the expressions of upstream's
// request-attribute-reporter: the part of CEL (the Common Expression
// Language) those configurations write over a response's token usage, with
// CEL's meaning. An expression is parsed and checked once, when the
// configuration is loaded, and evaluated for each response without
// allocating.
//
// What an expression may use: integer literals (decimal or 0x hex), double
// literals (1.5, .5, 1e3), true and false; the fields usage.prompt_tokens,
// usage.completion_tokens and usage.total_tokens; has() of a field;
// + - * / % and unary -; < <= > >= == !=; && || !; parentheses; c ? a : b;
// and // comments. Any other construct (a function call, a string, a list,
// a map, an unsigned literal) is refused with its column and that list.
//
// The fields are what upstream's CEL environment sees: a
// google.protobuf.Struct of JSON numbers, so each is a double, present on
// every response (0 when the model server reported none), and has() of one
// is always true. As in CEL, arithmetic does not mix int and double,
// integer arithmetic fails on overflow and division by zero, double
// arithmetic follows IEEE 754, and numbers of either kind compare with
// each other. Where CEL's checker, seeing the fields' type as dyn, would
// accept what fails on every response, the check here refuses it at load:
// a field in arithmetic with an int (usage.prompt_tokens * 2; write 2.0),
// in %, or under !, && or || or as the condition of c ? a : b.
package attrexpr

import (
	"fmt"
	"strconv"
)

// supported is the list of what an expression may use, for errors.
const supported = "expressions may use integer and double literals, true, false, " +
	"usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, has(usage.<field>), " +
	"+ - * / %, < <= > >= == !=, && || !, parentheses and c ? a : b"

type tokKind uint8

const (
	tEOF tokKind = iota
	tInt
	tDouble
	tIdent
	tOp // punctuation and operators; text holds which
)

type token struct {
	kind tokKind
	text string
	pos  int // byte offset in the source
}

// lex splits src into tokens.
func lex(src string) ([]token, error) {
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case isDigit(c) || c == '.' && i+1 < len(src) && isDigit(src[i+1]):
			t, err := lexNumber(src, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, t)
			i += len(t.text)
		case isIdentStart(c):
			j := i + 1
			for j < len(src) && (isIdentStart(src[j]) || isDigit(src[j])) {
				j++
			}
			toks = append(toks, token{kind: tIdent, text: src[i:j], pos: i})
			i = j
		case c == '"' || c == '\'':
			return nil, errorAt(src, i, "strings are not supported")
		case c == '[' || c == ']':
			return nil, errorAt(src, i, "lists and indexing are not supported")
		case c == '{' || c == '}':
			return nil, errorAt(src, i, "maps and messages are not supported")
		default:
			op := ""
			if i+1 < len(src) {
				switch two := src[i : i+2]; two {
				case "<=", ">=", "==", "!=", "&&", "||":
					op = two
				}
			}
			if op == "" {
				switch c {
				case '+', '-', '*', '/', '%', '<', '>', '!', '(', ')', '?', ':', '.', ',':
					op = src[i : i+1]
				default:
					return nil, errorAt(src, i, fmt.Sprintf("unexpected character %q", c))
				}
			}
			toks = append(toks, token{kind: tOp, text: op, pos: i})
			i += len(op)
		}
	}
	return append(toks, token{kind: tEOF, pos: len(src)}), nil
}

// lexNumber reads the number at src[i:]: an int (decimal or 0x hex) or a
// double (digits with a fraction, an exponent or both).
func lexNumber(src string, i int) (token, error) {
	j := i
	if src[j] == '0' && j+1 < len(src) && src[j+1] == 'x' {
		j += 2
		for j < len(src) && isHex(src[j]) {
			j++
		}
		if j == i+2 {
			return token{}, errorAt(src, i, "malformed number: 0x needs hex digits")
		}
		t := token{kind: tInt, text: src[i:j], pos: i}
		return t, checkSuffix(src, j)
	}
	for j < len(src) && isDigit(src[j]) {
		j++
	}
	kind := tInt
	if j+1 < len(src) && src[j] == '.' && isDigit(src[j+1]) {
		kind = tDouble
		j++
		for j < len(src) && isDigit(src[j]) {
			j++
		}
	}
	if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
		k := j + 1
		if k < len(src) && (src[k] == '+' || src[k] == '-') {
			k++
		}
		if k < len(src) && isDigit(src[k]) {
			kind = tDouble
			for j = k; j < len(src) && isDigit(src[j]); j++ {
			}
		}
	}
	return token{kind: kind, text: src[i:j], pos: i}, checkSuffix(src, j)
}

// checkSuffix refuses what may follow a number: u (CEL's unsigned
// literals) or a letter.
func checkSuffix(src string, j int) error {
	if j < len(src) && (src[j] == 'u' || src[j] == 'U') {
		return errorAt(src, j, "unsigned literals are not supported")
	}
	if j < len(src) && (isIdentStart(src[j]) || isDigit(src[j])) {
		return errorAt(src, j, "malformed number")
	}
	return nil
}

func isDigit(c byte) bool      { return '0' <= c && c <= '9' }
func isHex(c byte) bool        { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
func isIdentStart(c byte) bool { return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// errorAt is an error about the source at byte offset pos, which it names
// by line and column (both from 1).
func errorAt(src string, pos int, msg string) error {
	line, col := 1, 1
	for k := 0; k < pos && k < len(src); k++ {
		if src[k] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	if line > 1 {
		return fmt.Errorf("line %d column %d of the expression: %s", line, col, msg)
	}
	return fmt.Errorf("column %d: %s", col, msg)
}

// parseInt reads an int literal's text (decimal or hex), negated when neg.
func parseInt(text string, neg bool) (int64, error) {
	base := 10
	if len(text) > 1 && text[1] == 'x' {
		text, base = text[2:], 16
	}
	if neg {
		text = "-" + text
	}
	return strconv.ParseInt(text, base, 64)
}

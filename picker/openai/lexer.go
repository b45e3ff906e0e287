package openai

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// lexer is a validating JSON reader over one document held in memory. It never
// decodes: strings come back as the raw bytes between their quotes, escapes
// left as they are, and values the caller does not want are skipped, though
// always checked against the JSON grammar.
type lexer struct {
	b     []byte
	i     int
	depth int
	// escaped is the bytes the escapes of the string str read last take
	// beyond the one character each stands for.
	escaped int
}

func (l *lexer) reset(b []byte) {
	l.b, l.i, l.depth = b, 0, 0
}

// peek skips whitespace and returns the next byte, or 0 at the end.
func (l *lexer) peek() byte {
	for l.i < len(l.b) {
		switch c := l.b[l.i]; c {
		case ' ', '\t', '\n', '\r':
			l.i++
		default:
			return c
		}
	}
	return 0
}

// kindName names the JSON type of the next value, for error messages.
func (l *lexer) kindName() string {
	switch c := l.peek(); {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	case c == '-' || c >= '0' && c <= '9':
		return "number"
	default:
		return "invalid JSON"
	}
}

// Masks for looking at eight bytes of a string at once.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// str reads the string that starts at the current byte, which must be '"',
// and returns its raw content. It checks escapes, control characters and
// UTF-8. Quotes and backslashes are found with bytes.IndexByte, which the
// runtime vectorizes; the text between them is checked eight bytes at a time,
// and checked for UTF-8 only where it is not ASCII.
func (l *lexer) str() ([]byte, error) {
	b := l.b
	start := l.i + 1
	i := start
	// Most keys and many values are short ASCII strings: when the closing
	// quote is among the next eight bytes, with nothing to check before it,
	// they are done here.
	if start+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[start:])
		if m := special(x); m != 0 {
			n := bits.TrailingZeros64(m) / 8
			if b[start+n] == '"' && x&(1<<(8*n)-1)&highs == 0 {
				l.i, l.escaped = start+n+1, 0
				return b[start : start+n], nil
			}
		}
	}
	end := -1 // the next quote at or after i, which may yet prove escaped
	escaped := 0
	for {
		if end < i {
			q := bytes.IndexByte(b[i:], '"')
			if q < 0 {
				l.i = len(b)
				return nil, syntaxError(l, "unterminated string")
			}
			end = i + q
		}
		seg := b[i:end]
		bs := bytes.IndexByte(seg, '\\')
		if bs >= 0 {
			seg = seg[:bs]
		}
		if err := l.plain(seg, i); err != nil {
			return nil, err
		}
		if bs < 0 {
			break
		}
		i += bs
		n, ok := escapeLen(b[i:])
		if !ok {
			l.i = i
			return nil, syntaxError(l, "invalid escape")
		}
		i += n
		escaped += n - 1
	}
	l.i, l.escaped = end+1, escaped
	return b[start:end], nil
}

// plain checks a run of string text, at offset off, that holds no quote or
// backslash: no control characters, and valid UTF-8. Since the run ends at a
// quote or an escape, it never splits a character.
func (l *lexer) plain(s []byte, off int) error {
	var ctl, high uint64
	if len(s) >= 8 {
		t := s
		for len(t) >= 16 {
			x := binary.LittleEndian.Uint64(t)
			y := binary.LittleEndian.Uint64(t[8:])
			ctl |= ((x - ones*0x20) &^ x) | ((y - ones*0x20) &^ y)
			high |= x | y
			t = t[16:]
		}
		if len(t) >= 8 {
			x := binary.LittleEndian.Uint64(t)
			ctl |= (x - ones*0x20) &^ x
			high |= x
		}
		// The last eight bytes, overlapping what was read already.
		x := binary.LittleEndian.Uint64(s[len(s)-8:])
		ctl |= (x - ones*0x20) &^ x
		high |= x
	} else {
		for _, c := range s {
			if c < 0x20 {
				ctl |= highs
			}
			high |= uint64(c)
		}
	}
	if ctl&highs != 0 {
		l.i = off + bytes.IndexFunc(s, func(r rune) bool { return r < 0x20 })
		return syntaxError(l, "control character in string")
	}
	if high&highs != 0 && !utf8.Valid(s) {
		l.i = off
		return fmt.Errorf("%w: invalid UTF-8 in string near offset %d", ErrSyntax, off)
	}
	return nil
}

// special flags the bytes of x (eight bytes, little-endian) that are a
// quote, a backslash or a control character. The lowest flagged byte is
// always a true match; flags above it may not be.
func special(x uint64) uint64 {
	q := x ^ (ones * '"')
	s := x ^ (ones * '\\')
	return (((q - ones) &^ q) | ((s - ones) &^ s) | ((x - ones*0x20) &^ x)) & highs
}

// escapeLen returns the length of the escape sequence that starts b.
func escapeLen(b []byte) (int, bool) {
	if len(b) < 2 {
		return 0, false
	}
	switch b[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, true
	case 'u':
		if len(b) < 6 {
			return 0, false
		}
		for _, h := range b[2:6] {
			if !isHex(h) {
				return 0, false
			}
		}
		return 6, true
	}
	return 0, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// num reads a number at the current byte, checking the JSON grammar.
func (l *lexer) num() error {
	b, i := l.b, l.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	default:
		l.i = i
		return syntaxError(l, "invalid value")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			l.i = i
			return syntaxError(l, "invalid number")
		}
		for ; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			l.i = i
			return syntaxError(l, "invalid number")
		}
		for ; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	l.i = i
	return nil
}

// count reads a number and returns it if it is a non-negative integer that
// fits comfortably in an int; other numbers give ok == false.
func (l *lexer) count() (n int, ok bool, err error) {
	start := l.i
	if err := l.num(); err != nil {
		return 0, false, err
	}
	digits := l.b[start:l.i]
	if len(digits) == 0 || len(digits) > 15 {
		return 0, false, nil
	}
	for _, c := range digits {
		if !isDigit(c) {
			return 0, false, nil
		}
		n = n*10 + int(c-'0')
	}
	return n, true, nil
}

// lit reads the literal word (true, false or null) at the current byte.
func (l *lexer) lit(word string) error {
	if len(l.b)-l.i < len(word) || string(l.b[l.i:l.i+len(word)]) != word {
		return syntaxError(l, "invalid literal")
	}
	l.i += len(word)
	return nil
}

// boolean reads a boolean as vLLM's pydantic models read one in their
// default lax mode: true or false, or what laxBoolean reads; present is
// false for null.
func (l *lexer) boolean(field string) (v, present bool, err error) {
	switch l.peek() {
	case 't':
		return true, true, l.lit("true")
	case 'f':
		return false, true, l.lit("false")
	case 'n':
		return false, false, l.lit("null")
	}
	return l.laxBoolean(field)
}

// laxBoolean reads the other values pydantic's lax mode takes for a
// boolean: the numbers 0 and 1 (1.0 and 0e5 too), and a string laxBool
// knows. Anything else has the wrong type.
func (l *lexer) laxBoolean(field string) (v, present bool, err error) {
	start := l.i
	switch c := l.peek(); {
	case c == '"':
		s, err := l.str()
		if err != nil {
			return false, false, err
		}
		if v, ok := laxBool(s); ok {
			return v, true, nil
		}
	case c == '-' || isDigit(c):
		if err := l.num(); err != nil {
			return false, false, err
		}
		// Only a finite number can be 0 or 1; one out of float64's range
		// fails to parse and is refused.
		switch f, err := strconv.ParseFloat(string(l.b[start:l.i]), 64); {
		case err == nil && f == 0:
			return false, true, nil
		case err == nil && f == 1:
			return true, true, nil
		}
	}
	l.i = start
	return false, false, fieldTypeError(field, l, "a boolean")
}

// laxBool reads the raw content of a JSON string as pydantic reads a string
// given for a bool: "0", "1", or, in any ASCII case, f, n, no, off, false
// and t, y, on, yes, true. A string with escapes is read as what it decodes
// to.
func laxBool(raw []byte) (v, ok bool) {
	if len(raw) > len(`\u0066\u0061\u006c\u0073\u0065`) { // "false", every byte escaped
		return false, false
	}
	if bytes.IndexByte(raw, '\\') >= 0 {
		raw = unescapeKey(raw)
	}
	if len(raw) > len("false") {
		return false, false
	}
	var low [len("false")]byte
	for i, c := range raw {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		low[i] = c
	}
	switch string(low[:len(raw)]) {
	case "0", "f", "n", "no", "off", "false":
		return false, true
	case "1", "t", "y", "on", "yes", "true":
		return true, true
	}
	return false, false
}

var errTooDeep = fmt.Errorf("%w: more than %d levels", ErrTooDeep, MaxDepth)

// open consumes the '{' or '[' at the current byte and reports whether the
// object or array has members; an empty one is consumed whole.
func (l *lexer) open(end byte) (bool, error) {
	l.depth++
	if l.depth > MaxDepth {
		return false, errTooDeep
	}
	l.i++
	if l.peek() == end {
		l.i++
		l.depth--
		return false, nil
	}
	return true, nil
}

// members reads the object at the current byte, calling each with every key
// and the lexer at the start of that key's value, which each must consume.
func (l *lexer) members(each func(key []byte) error) error {
	more, err := l.open('}')
	for more && err == nil {
		var key []byte
		if key, err = l.key(); err != nil {
			return err
		}
		if err := each(key); err != nil {
			return err
		}
		more, err = l.next('}')
	}
	return err
}

// unescapeKey returns a member name written with escapes ("m\u006fdel") as
// the name it is, which is what a JSON decoder matches. The lexer has
// checked its escapes.
func unescapeKey(raw []byte) []byte {
	var s string
	if err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s); err != nil {
		return raw
	}
	return []byte(s)
}

// elements reads the array at the current byte, calling each with the lexer
// at the start of every element, which each must consume.
func (l *lexer) elements(each func() error) error {
	more, err := l.open(']')
	for more && err == nil {
		if err := each(); err != nil {
			return err
		}
		more, err = l.next(']')
	}
	return err
}

// next reads the ',' or closing byte after a member and reports whether
// another member follows.
func (l *lexer) next(end byte) (bool, error) {
	switch l.peek() {
	case ',':
		l.i++
		return true, nil
	case end:
		l.i++
		l.depth--
		return false, nil
	}
	return false, syntaxError(l, "expected ',' or '"+string(end)+"'")
}

// key reads an object key and the colon after it. A key written with
// escapes comes back decoded.
func (l *lexer) key() ([]byte, error) {
	if l.peek() != '"' {
		return nil, syntaxError(l, "expected object key")
	}
	k, err := l.str()
	if err != nil {
		return nil, err
	}
	if l.peek() != ':' {
		return nil, syntaxError(l, "expected ':'")
	}
	l.i++
	if bytes.IndexByte(k, '\\') >= 0 {
		k = unescapeKey(k)
	}
	return k, nil
}

// skip reads one value of any type, checking it, and discards it.
func (l *lexer) skip() error {
	switch l.peek() {
	case '"':
		_, err := l.str()
		return err
	case '{':
		more, err := l.open('}')
		for more && err == nil {
			if _, err = l.key(); err != nil {
				return err
			}
			if err := l.skip(); err != nil {
				return err
			}
			more, err = l.next('}')
		}
		return err
	case '[':
		more, err := l.open(']')
		for more && err == nil {
			if err := l.skip(); err != nil {
				return err
			}
			more, err = l.next(']')
		}
		return err
	case 't':
		return l.lit("true")
	case 'f':
		return l.lit("false")
	case 'n':
		return l.lit("null")
	}
	return l.num()
}

// span skips one value and returns its raw JSON text.
func (l *lexer) span() ([]byte, error) {
	l.peek()
	start := l.i
	if err := l.skip(); err != nil {
		return nil, err
	}
	return l.b[start:l.i], nil
}

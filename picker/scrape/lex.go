package scrape

import (
	"bytes"
	"strconv"
	"strings"
)

// This file reads single lines of the Prometheus text exposition format.
// It follows the grammar the reference parser accepts: names may be bare or
// quoted (also inside the braces, as the UTF-8 form writes them), blanks
// and tabs may surround every token, and a sample may carry a timestamp.
// It is a little more lenient (trailing blanks, any escape sequence), never
// stricter, so that every input the reference parser takes is read the same.

// maxName is the longest composed name kept; longer names are never ours.
const maxName = 64

// cursor walks one line.
type cursor struct {
	b []byte
	i int
}

func (c *cursor) skipBlank() {
	for c.i < len(c.b) && (c.b[c.i] == ' ' || c.b[c.i] == '\t') {
		c.i++
	}
}

func (c *cursor) atEnd() bool { return c.i >= len(c.b) }

// Classes of name bytes, as bits of charClass.
const (
	metricStart = 1 << iota
	metricByte
	labelStart
	labelByte
)

// charClass tells which names a byte may start or continue.
var charClass = func() (t [256]uint8) {
	for b := range 256 {
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b == '_':
			t[b] = metricStart | metricByte | labelStart | labelByte
		case b == ':':
			t[b] = metricStart | metricByte
		case b >= '0' && b <= '9':
			t[b] = metricByte | labelByte
		}
	}
	return t
}()

func isNameStart(b byte, label bool) bool {
	if label {
		return charClass[b]&labelStart != 0
	}
	return charClass[b]&metricStart != 0
}

// name reads a metric or label name: bare characters, optionally followed
// by a quoted part. The result is the name as written when it could be one
// we look for; a name with escape sequences, or too long to compose into
// scratch, comes back as its raw text, quotes included, which matches
// nothing we look for. It reports false when no name is there.
func (c *cursor) name(label bool, scratch *[maxName]byte) ([]byte, bool) {
	start := c.i
	if c.i < len(c.b) && isNameStart(c.b[c.i], label) {
		var class uint8 = metricByte
		if label {
			class = labelByte
		}
		// Locals, so that the loop keeps them in registers.
		b, i := c.b, c.i+1
		for i < len(b) && charClass[b[i]]&class != 0 {
			i++
		}
		c.i = i
	}
	if c.i >= len(c.b) || c.b[c.i] != '"' {
		return c.b[start:c.i], c.i > start
	}
	bare := c.b[start:c.i]
	q := c.i + 1
	escaped := false
	for c.i = q; c.i < len(c.b); c.i++ {
		switch c.b[c.i] {
		case '\\':
			escaped = true
			c.i++
		case '"':
			quoted := c.b[q:c.i]
			c.i++
			switch {
			case len(bare)+len(quoted) == 0:
				return nil, false
			case escaped:
				return c.b[start:c.i], true
			case len(bare) == 0:
				return quoted, true
			case len(bare)+len(quoted) > maxName:
				return c.b[start:c.i], true
			}
			n := copy(scratch[:], bare)
			n += copy(scratch[n:], quoted)
			return scratch[:n], true
		}
	}
	return nil, false
}

// quoted reads a label value; the cursor is on its opening quote. The value
// is returned raw, with escaped telling whether it needs unescaping.
func (c *cursor) quoted() (v []byte, escaped, ok bool) {
	if c.i >= len(c.b) || c.b[c.i] != '"' {
		return nil, false, false
	}
	start := c.i + 1
	for c.i = start; c.i < len(c.b); c.i++ {
		switch c.b[c.i] {
		case '\\':
			escaped = true
			c.i++
		case '"':
			v = c.b[start:c.i]
			c.i++
			return v, escaped, true
		}
	}
	return nil, false, false
}

// token reads up to the next blank.
func (c *cursor) token() []byte {
	start := c.i
	for c.i < len(c.b) && c.b[c.i] != ' ' && c.b[c.i] != '\t' {
		c.i++
	}
	return c.b[start:c.i]
}

// label is one entry of a label set. An entry without a value is a metric
// name written inside the braces.
type label struct {
	key, value []byte
	hasValue   bool
	escaped    bool // value holds escape sequences
}

// labelIter walks a label set. Start it just after the opening brace.
type labelIter struct {
	c       cursor
	done    bool // the closing brace was read
	bad     bool // the set is malformed
	scratch [maxName]byte
}

// next returns the next entry. It returns false at the closing brace and
// on a malformed set; bad tells which.
func (it *labelIter) next() (label, bool) {
	if it.done || it.bad {
		return label{}, false
	}
	c := &it.c
	c.skipBlank()
	if c.atEnd() {
		it.bad = true
		return label{}, false
	}
	if c.b[c.i] == '}' {
		c.i++
		it.done = true
		return label{}, false
	}
	var l label
	var ok bool
	if l.key, ok = c.name(true, &it.scratch); !ok {
		it.bad = true
		return label{}, false
	}
	c.skipBlank()
	if !c.atEnd() && c.b[c.i] == '=' {
		c.i++
		c.skipBlank()
		if l.value, l.escaped, ok = c.quoted(); !ok {
			it.bad = true
			return label{}, false
		}
		l.hasValue = true
		c.skipBlank()
	}
	switch {
	case c.atEnd():
		it.bad = true
		return label{}, false
	case c.b[c.i] == ',':
		c.i++
	case c.b[c.i] == '}':
		c.i++
		it.done = true
	default:
		it.bad = true
		return label{}, false
	}
	return l, true
}

// sample is one parsed sample line.
type sample struct {
	name   []byte
	labels []byte // the label set after '{', closing brace included; nil when absent
	value  float64
}

// parseSample parses a sample line whose first byte is not blank. It
// reports false when the line is malformed. The name may be composed in
// scratch.
func parseSample(line []byte, scratch *[maxName]byte) (sample, bool) {
	var s sample
	c := cursor{b: line}
	braced := len(line) > 0 && line[0] == '{'
	if !braced {
		var ok bool
		if s.name, ok = c.name(false, scratch); !ok {
			return s, false
		}
		c.skipBlank()
	}
	s.labels = nil
	if !c.atEnd() && c.b[c.i] == '{' {
		it := labelIter{c: cursor{b: line, i: c.i + 1}}
		for {
			l, ok := it.next()
			if !ok {
				break
			}
			if l.hasValue {
				continue
			}
			if !braced || s.name != nil {
				return s, false
			}
			// The key may sit in the iterator's own scratch; keep a copy.
			s.name = scratch[:0:maxName]
			s.name = append(s.name, l.key...)
		}
		if it.bad || s.name == nil {
			return s, false
		}
		s.labels = line[c.i+1 : it.c.i]
		c.i = it.c.i
		c.skipBlank()
	}
	v, ok := parseValue(c.token())
	if !ok {
		return s, false
	}
	s.value = v
	c.skipBlank()
	if c.atEnd() {
		return s, true
	}
	if _, err := strconv.ParseInt(string(c.token()), 10, 64); err != nil {
		return s, false
	}
	c.skipBlank()
	return s, c.atEnd()
}

// parseValue reads a sample value: a decimal float, NaN or ±Inf.
// Hexadecimal floats and digit separators are refused, as the reference
// parser refuses them.
func parseValue(tok []byte) (float64, bool) {
	if len(tok) == 0 || bytes.ContainsAny(tok, "pP_") {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(tok), 64)
	return v, err == nil
}

// labelValue returns the value of a label as text, unescaping \\, \" and
// \n when needed.
func labelValue(l label) string {
	if !l.escaped {
		return string(l.value)
	}
	var b strings.Builder
	b.Grow(len(l.value))
	for i := 0; i < len(l.value); i++ {
		ch := l.value[i]
		if ch == '\\' && i+1 < len(l.value) {
			i++
			ch = l.value[i]
			if ch == 'n' {
				ch = '\n'
			}
		}
		b.WriteByte(ch)
	}
	return b.String()
}

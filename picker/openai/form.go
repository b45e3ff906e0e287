package openai

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"mime"
	"net/textproto"
	"strings"
)

// FormBoundary returns the boundary of a multipart/form-data content type
// (an upload to /v1/audio/transcriptions, say), or false for any other
// content type. Only a multipart content type is parsed in full, from a
// copy: contentType is not kept, so a header value converted for the call
// need not move to the heap.
func FormBoundary(contentType string) (string, bool) {
	const media = "multipart/form-data"
	ct := strings.TrimLeft(contentType, " \t")
	if len(ct) < len(media) || !strings.EqualFold(ct[:len(media)], media) {
		return "", false
	}
	typ, params, err := mime.ParseMediaType(strings.Clone(contentType))
	if err != nil || typ != media || params["boundary"] == "" {
		return "", false
	}
	return params["boundary"], true
}

// maxFormLine is the longest line Go's multipart reader takes between
// parts (its buffer): a longer preamble or boundary line makes the body
// unreadable.
const maxFormLine = 4096

// FormModel finds the value of the "model" field of a multipart/form-data
// body (RFC 7578) with the given boundary: body[start:end], the last such
// field's when there are several, as the model server's form parser keeps
// the last. It reads the body as Go's mime/multipart reader does, in one
// pass over it without copying it: lines before the first boundary are a
// preamble, lines may end in LF alone when the first boundary's does, and
// a part's value ends at the line break before the next boundary. found
// is false when no part is named "model", when that part has a
// content-transfer-encoding that changes its bytes (quoted-printable,
// base64), when that part is cut short by the body's end, or when the body
// is not a well-formed form. As with Go's reader, a body that ends, cut
// short, in a later part or line ends the form there. A part whose headers or content-disposition go beyond the
// plain forms clients write is read with the standard library, which
// allocates.
func FormModel(body []byte, boundary string) (start, end int, found bool) {
	if boundary == "" {
		return 0, 0, false
	}
	f := form{b: body, delim: []byte("\r\n--" + boundary + "--"), nl: 2}
	return f.model()
}

// FormModelPrefix is FormModel for the front of a body still arriving: it
// finds the first "model" field once the bytes held show where its value
// ends (the boundary after it and the byte after that), and reports false
// while they do not, or when the front is not a form. What follows the
// field is not read: a later "model" field, or a malformed end, is not
// seen.
func FormModelPrefix(front []byte, boundary string) (start, end int, found bool) {
	if boundary == "" {
		return 0, 0, false
	}
	f := form{b: front, delim: []byte("\r\n--" + boundary + "--"), nl: 2, prefix: true}
	return f.model()
}

// form is the state of one FormModel pass. delim is "\r\n--boundary--";
// nl is the length of the line break in use (2 for CRLF, 1 for LF).
// prefix: b is the front of a body, whose end is not the body's.
type form struct {
	b      []byte
	delim  []byte
	nl     int
	prefix bool
}

func (f *form) dashBoundary() []byte { return f.delim[2 : len(f.delim)-2] }

// nlDashBoundary is the line break and the boundary that end a value.
func (f *form) nlDashBoundary() []byte { return f.delim[2-f.nl : len(f.delim)-2] }

func (f *form) model() (start, end int, found bool) {
	pos, parts, expectPart := 0, 0, false
	for {
		rest := f.b[pos:]
		n := bytes.IndexByte(rest[:min(len(rest), maxFormLine)], '\n')
		if n < 0 {
			// As Go's reader: a body that ends in a line without its
			// line break ends the form there, whether that line is the
			// closing boundary or a boundary cut short.
			if !f.prefix && len(rest) < maxFormLine {
				return start, end, found
			}
			return 0, 0, false
		}
		line := rest[:n+1]
		pos += n + 1
		switch {
		case f.isDelimiter(line, parts == 0):
			parts++
			expectPart = false
			valueAt, name, identity, err := f.headers(pos)
			if errors.Is(err, io.EOF) && !f.prefix { // as Go's reader: a part cut short in its headers ends the form
				return start, end, found
			}
			if err != nil {
				return 0, 0, false
			}
			valueEnd, ok := f.value(valueAt)
			if !ok && !f.prefix && !name {
				// As Go's reader: a part the body ends in, with no
				// boundary after it, ends the form; a model field cut
				// short has no value.
				return start, end, found
			}
			if !ok {
				return 0, 0, false
			}
			if name && f.prefix {
				return valueAt, valueEnd, identity
			}
			if name {
				start, end, found = valueAt, valueEnd, identity
			}
			pos = valueEnd
		case f.isClose(line):
			return start, end, found
		case expectPart:
			return 0, 0, false
		case parts == 0: // preamble
		case len(line) == f.nl && (f.nl == 1 || line[0] == '\r'):
			expectPart = true
		default:
			return 0, 0, false
		}
	}
}

// isDelimiter reports whether line is a boundary line: "--boundary",
// blanks, the line break. On the first one, a line ending in LF alone
// makes LF the line break of the whole body.
func (f *form) isDelimiter(line []byte, first bool) bool {
	rest, ok := bytes.CutPrefix(line, f.dashBoundary())
	if !ok {
		return false
	}
	rest = bytes.TrimLeft(rest, " \t")
	if first && len(rest) == 1 && rest[0] == '\n' {
		f.nl = 1
	}
	return f.isBreak(rest)
}

// isClose reports whether line is the closing boundary "--boundary--",
// blanks, then the line break or the end of the body.
func (f *form) isClose(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, f.delim[2:])
	if !ok {
		return false
	}
	rest = bytes.TrimLeft(rest, " \t")
	return len(rest) == 0 || f.isBreak(rest)
}

func (f *form) isBreak(b []byte) bool {
	if f.nl == 1 {
		return len(b) == 1 && b[0] == '\n'
	}
	return len(b) == 2 && b[0] == '\r' && b[1] == '\n'
}

// value returns where the value that starts at i ends: at the line break
// before the next boundary, or at i when the boundary follows the headers
// at once. A boundary is one when a blank, a line break, "--" or the end
// of the body follows it. ok is false when no boundary ends the value in
// the bytes held.
func (f *form) value(i int) (end int, ok bool) {
	dash := f.dashBoundary()
	if bytes.HasPrefix(f.b[i:], dash) {
		ends, known := f.endsBoundary(i + len(dash))
		switch {
		case !known:
			return 0, false
		case ends:
			return i, true
		}
		i += len(dash)
	}
	nld := f.nlDashBoundary()
	for {
		j := bytes.Index(f.b[i:], nld)
		if j < 0 {
			return 0, false
		}
		ends, known := f.endsBoundary(i + j + len(nld))
		switch {
		case !known:
			return 0, false
		case ends:
			return i + j, true
		}
		i += j + len(nld)
	}
}

// endsBoundary reports whether the boundary before i ends there; known is
// false when only the bytes past the front held can tell.
func (f *form) endsBoundary(i int) (ends, known bool) {
	if i == len(f.b) {
		return true, !f.prefix
	}
	switch f.b[i] {
	case ' ', '\t', '\r', '\n':
		return true, true
	case '-':
		if i+1 == len(f.b) {
			return false, !f.prefix
		}
		return f.b[i+1] == '-', true
	}
	return false, true
}

// headers reads a part's headers from i: where its value starts, whether
// its content-disposition names it "model", and whether its bytes are the
// value as they are (no content-transfer-encoding, or an identity one).
// err is io.EOF when the body ends in the headers, another error when they
// are malformed.
// Header lines of a token, a colon and a value of visible characters,
// each ending in a line break, are read here; anything else (a folded
// line, a malformed line, the end of the body) by net/textproto.
func (f *form) headers(i int) (valueAt int, name, identity bool, err error) {
	disposition, encoding := []byte(nil), []byte(nil)
	sawDisposition, sawEncoding := false, false
	for p := i; ; {
		n := bytes.IndexByte(f.b[p:], '\n')
		if n < 0 {
			return f.slowHeaders(i)
		}
		line, next := f.b[p:p+n], p+n+1
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) == 0 {
			if !sawDisposition {
				return next, false, true, nil
			}
			named, simple := dispositionNamesModel(disposition)
			if !simple {
				return f.slowHeaders(i)
			}
			return next, named, identityEncoding(encoding), nil
		}
		key, value, plain := headerLine(line)
		if f.prefix && next == len(f.b) { // a folded line may follow
			return 0, false, false, io.EOF
		}
		if !plain || next < len(f.b) && (f.b[next] == ' ' || f.b[next] == '\t') {
			return f.slowHeaders(i)
		}
		switch {
		case !sawDisposition && asciiEqualFold(key, "content-disposition"):
			disposition, sawDisposition = value, true
		case !sawEncoding && asciiEqualFold(key, "content-transfer-encoding"):
			encoding, sawEncoding = value, true
		}
		p = next
	}
}

// headerLine splits a header line into its key and its value without
// blanks around it; plain is false unless the key is a token and the value
// holds only visible characters and blanks.
func headerLine(line []byte) (key, value []byte, plain bool) {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return nil, nil, false
	}
	for _, c := range line[:colon] {
		if !isHeaderKeyByte(c) {
			return nil, nil, false
		}
	}
	for _, c := range line[colon+1:] {
		if c != '\t' && (c < ' ' || c >= 0x7f) {
			return nil, nil, false
		}
	}
	return line[:colon], bytes.Trim(line[colon+1:], " \t"), true
}

// slowHeaders reads a part's headers from i with net/textproto, as Go's
// multipart reader does.
func (f *form) slowHeaders(i int) (valueAt int, name, identity bool, err error) {
	src := bytes.NewReader(f.b[i:])
	br := bufio.NewReaderSize(src, maxFormLine)
	h, err := textproto.NewReader(br).ReadMIMEHeader()
	if err != nil {
		return 0, false, false, err
	}
	valueAt = len(f.b) - src.Len() - br.Buffered()
	typ, params, err := mime.ParseMediaType(h.Get("Content-Disposition"))
	name = err == nil && typ == "form-data" && params["name"] == "model"
	return valueAt, name, identityEncoding([]byte(h.Get("Content-Transfer-Encoding"))), nil
}

// identityEncoding reports whether a content-transfer-encoding leaves a
// value's bytes as they are.
func identityEncoding(enc []byte) bool {
	return len(enc) == 0 || asciiEqualFold(enc, "7bit") || asciiEqualFold(enc, "8bit") || asciiEqualFold(enc, "binary")
}

// maxDispositionParams is the most parameters a content-disposition read
// without the standard library has; "name" and "filename" are the usual.
const maxDispositionParams = 4

// dispositionNamesModel reports whether a content-disposition value (ASCII,
// blanks around it trimmed) is form-data named "model", as
// mime.ParseMediaType reads it. simple is false when the value is beyond
// the plain form read here (non-ASCII bytes, RFC 2231 parameters, escapes
// in a quoted string, a syntax error, many parameters): then the caller
// asks mime.ParseMediaType.
func dispositionNamesModel(v []byte) (named, simple bool) {
	base, rest := v, []byte(nil)
	if i := bytes.IndexByte(v, ';'); i >= 0 {
		base, rest = v[:i], v[i:]
	}
	if !asciiEqualFold(bytes.Trim(base, " \t"), "form-data") {
		return false, false
	}
	var keys, values [maxDispositionParams][]byte
	n := 0
	for {
		rest = bytes.TrimLeft(rest, " \t")
		if len(rest) == 0 {
			break
		}
		if rest[0] != ';' {
			return false, false
		}
		rest = bytes.TrimLeft(rest[1:], " \t")
		if len(rest) == 0 {
			break // a trailing ';'
		}
		k := tokenLen(rest)
		if k == 0 || n == maxDispositionParams {
			return false, false
		}
		key := rest[:k]
		if bytes.IndexByte(key, '*') >= 0 {
			return false, false
		}
		rest = bytes.TrimLeft(rest[k:], " \t")
		if len(rest) == 0 || rest[0] != '=' {
			return false, false
		}
		rest = bytes.TrimLeft(rest[1:], " \t")
		var value []byte
		switch {
		case len(rest) > 0 && rest[0] == '"':
			q := bytes.IndexAny(rest[1:], "\"\\")
			if q < 0 || rest[1+q] != '"' {
				return false, false
			}
			value, rest = rest[1:1+q], rest[2+q:]
		default:
			t := tokenLen(rest)
			if t == 0 {
				return false, false
			}
			value, rest = rest[:t], rest[t:]
		}
		for j := range n {
			if bytes.EqualFold(keys[j], key) && !bytes.Equal(values[j], value) {
				return false, true // duplicate parameters: not a disposition
			}
		}
		keys[n], values[n] = key, value
		n++
	}
	for j := range n {
		if asciiEqualFold(keys[j], "name") {
			return string(values[j]) == "model", true
		}
	}
	return false, true
}

// tokenLen is the length of the MIME token (RFC 2045) that b starts with.
func tokenLen(b []byte) int {
	for i, c := range b {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?=`, c) >= 0 {
			return i
		}
	}
	return len(b)
}

// isHeaderKeyByte reports whether c may be in a header's name (an RFC 7230
// token character).
func isHeaderKeyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// asciiEqualFold reports whether b is s in any case of its ASCII letters.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

package openai

import "bytes"

// Static prompt markers. They stand for the role tokens a chat template puts
// around each turn, so that the same text in different roles, or in a message
// and in the tools, never reads as the same prefix.
var (
	markSystem    = []byte("<|system|>\n")
	markDeveloper = []byte("<|developer|>\n")
	markUser      = []byte("<|user|>\n")
	markAssistant = []byte("<|assistant|>\n")
	markTool      = []byte("<|tool|>\n")
	markFunction  = []byte("<|function|>\n")
	markMessage   = []byte("<|message|>\n") // a turn with no role
	markTools     = []byte("<|tools|>\n")
	markToolCalls = []byte("<|tool_calls|>\n")
)

// comma separates the ids of a token array.
var comma = []byte(",")

// add appends a non-empty segment to the prompt.
func (p *parser) add(s []byte) {
	if len(s) > 0 {
		p.r.Prompt = append(p.r.Prompt, s)
	}
}

// addText is add for a string's content s, whose escapes take escaped
// bytes beyond a character each: it counts towards Request.Tokens.
func (p *parser) addText(s []byte, escaped int) {
	p.add(s)
	p.text += len(s) - escaped
}

// roleMarker returns the static marker of a known role, or else the role's
// raw JSON string token, quotes included, from the body.
func roleMarker(role, tok []byte) []byte {
	switch string(role) {
	case "system":
		return markSystem
	case "developer":
		return markDeveloper
	case "user":
		return markUser
	case "assistant":
		return markAssistant
	case "tool":
		return markTool
	case "function":
		return markFunction
	}
	if len(tok) == 0 {
		return markMessage
	}
	return tok
}

// messages reads the chat "messages" array.
func (p *parser) messages() error {
	l := &p.l
	if l.peek() != '[' {
		return fieldTypeError("messages", l, "an array")
	}
	return l.elements(func() error { return p.message("messages[]", false) })
}

// input reads the Responses "input": a string (one user turn) or an array of
// items.
func (p *parser) input() error {
	l := &p.l
	switch l.peek() {
	case '"':
		s, err := l.str()
		if len(s) > 0 {
			p.add(markUser)
			p.addText(s, l.escaped)
		}
		return err
	case '[':
	default:
		return fieldTypeError("input", l, "a string or an array")
	}
	return l.elements(func() error { return p.message("input[]", true) })
}

// message reads one chat message or Responses input item. Its role marker
// comes first in the prompt even when "role" comes after "content" in the
// body: a slot is kept for it and filled at the end. An input item (item is
// true) with neither role nor content is kept whole as its raw JSON.
func (p *parser) message(field string, item bool) error {
	l, r := &p.l, p.r
	if l.peek() != '{' {
		return fieldTypeError(field, l, "an object")
	}
	start := l.i
	slot := len(r.Prompt)
	r.Prompt = append(r.Prompt, nil)
	var role, roleTok, toolCalls []byte
	hasContent := false
	contentField := "messages[].content"
	if item {
		contentField = "input[].content"
	}
	more, err := l.open('}')
	for more && err == nil {
		var key []byte
		if key, err = l.key(); err != nil {
			return err
		}
		switch string(key) {
		case "role":
			if l.peek() != '"' {
				return fieldTypeError(field+".role", l, "a string")
			}
			s := l.i
			role, err = l.str()
			roleTok = l.b[s:l.i]
		case "content":
			hasContent = true
			err = p.content(contentField)
		case "tool_calls":
			if l.peek() == '[' {
				toolCalls, err = l.span()
			} else {
				err = l.skip()
			}
		default:
			err = l.skip()
		}
		if err != nil {
			return err
		}
		more, err = l.next('}')
	}
	if err != nil {
		return err
	}
	if item && roleTok == nil && !hasContent {
		r.Prompt[slot] = l.b[start:l.i]
		r.Prompt = r.Prompt[:slot+1]
		return nil
	}
	r.Prompt[slot] = roleMarker(role, roleTok)
	if len(toolCalls) > 2 { // not "[]"
		p.add(markToolCalls)
		p.add(toolCalls)
	}
	return nil
}

// content reads a message's content: a string, an array of parts, or null.
func (p *parser) content(field string) error {
	l := &p.l
	switch l.peek() {
	case '"':
		s, err := l.str()
		p.addText(s, l.escaped)
		return err
	case 'n':
		return l.lit("null")
	case '[':
	default:
		return fieldTypeError(field, l, "a string, an array or null")
	}
	return l.elements(func() error { return p.part(field) })
}

// part reads one content part. A text part contributes its text, and so does
// a bare string, which vLLM reads as a text part; any other part (image,
// audio, file, refusal) its raw JSON object, which identifies the media as
// well as a model server's own hashing of it would. A part other than text
// or a refusal marks the request's Media; an image_url or input_audio part
// its Encodable too.
func (p *parser) part(field string) error {
	l := &p.l
	switch l.peek() {
	case '"':
		s, err := l.str()
		p.addText(s, l.escaped)
		return err
	case '{':
	default:
		return fieldTypeError(field+"[]", l, "a string or an object")
	}
	start := l.i
	var typ, text []byte
	hasText, escaped := false, 0
	err := l.members(func(key []byte) (err error) {
		switch {
		case string(key) == "type" && l.peek() == '"':
			typ, err = l.str()
		case string(key) == "text" && l.peek() == '"':
			text, err = l.str()
			hasText, escaped = true, l.escaped
		default:
			err = l.skip()
		}
		return err
	})
	if err != nil {
		return err
	}
	if len(typ) <= maxTypeEscaped && bytes.IndexByte(typ, '\\') >= 0 {
		typ = unescapeKey(typ) // a type written with escapes is the type it spells
	}
	switch string(typ) {
	case "text", "input_text", "output_text":
		p.addText(text, escaped)
	case "":
		if hasText {
			p.addText(text, escaped)
		} else {
			p.add(l.b[start:l.i])
			p.r.Media = true
		}
	default:
		p.add(l.b[start:l.i])
		p.r.Media = p.r.Media || string(typ) != "refusal"
		p.r.Encodable = p.r.Encodable || string(typ) == "image_url" || string(typ) == "input_audio"
	}
	return nil
}

// maxTypeEscaped is the longest a part's type may be, written with escapes,
// and still be one the parser tells apart: "input_audio" with every byte
// escaped.
const maxTypeEscaped = len(`\u0069`) * len("output_text")

// promptValue reads a completions "prompt" or an embeddings "input": a
// string, an array of strings, a token array, or an array of token arrays.
// A token array contributes its raw JSON text without the brackets.
func (p *parser) promptValue(field string) error {
	l := &p.l
	switch l.peek() {
	case '"':
		s, err := l.str()
		p.addText(s, l.escaped)
		return err
	case '[':
	default:
		return fieldTypeError(field, l, "a string or an array")
	}
	start := l.i
	more, err := l.open(']')
	if !more || err != nil {
		return err
	}
	if c := l.peek(); c == '-' || isDigit(c) {
		for more && err == nil {
			if err := l.skip(); err != nil {
				return err
			}
			p.ids++
			more, err = l.next(']')
		}
		if err != nil {
			return err
		}
		p.add(tokens(l.b[start:l.i]))
		return nil
	}
	for more && err == nil {
		switch l.peek() {
		case '"':
			var s []byte
			s, err = l.str()
			p.addText(s, l.escaped)
		case '[':
			var s []byte
			if s, err = l.span(); err == nil {
				ids := tokens(s)
				p.add(ids)
				if len(ids) > 0 {
					p.ids += bytes.Count(ids, comma) + 1
				}
			}
		default:
			return fieldTypeError(field+"[]", l, "a string or a token array")
		}
		if err != nil {
			return err
		}
		more, err = l.next(']')
	}
	return err
}

// tokens strips the brackets and the whitespace inside them from the raw
// JSON text of a token array.
func tokens(s []byte) []byte {
	s = s[1 : len(s)-1]
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

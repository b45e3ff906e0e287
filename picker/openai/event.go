package openai

import "bytes"

// event reads the data of one stream event, or a whole JSON response body,
// and reports whether it was a valid JSON object (or the [DONE] marker). An
// invalid one changes nothing.
func (s *StreamScanner) event(data []byte) (Events, bool) {
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		return Done, true
	}
	var l lexer
	l.reset(data)
	if l.peek() != '{' {
		return 0, false
	}
	var e eventReader
	if err := e.read(&l); err != nil {
		return 0, false
	}
	l.peek()
	if l.i != len(l.b) {
		return 0, false
	}
	var ev Events
	if e.token || e.responseDelta() {
		ev |= FirstToken
		if !s.json {
			s.outputs++
		}
		s.choices = s.choices || e.otherChoice
	}
	if e.failed {
		ev |= Failed
	}
	if e.hasUsage {
		s.usage = e.usage
		ev |= UsageSeen
	}
	return ev, true
}

// eventReader collects what one event object says.
type eventReader struct {
	token bool // a choice carries output
	// otherChoice: a choice's index is not 0, one of several a request
	// asked for ("n").
	otherChoice bool
	typ         []byte // Responses event type
	delta       bool   // Responses event has a non-empty "delta"
	failed      bool
	hasUsage    bool
	usage       Usage
}

// responseDelta reports a Responses streaming event that carries output,
// such as response.output_text.delta or response.function_call_arguments.delta.
func (e *eventReader) responseDelta() bool {
	return e.delta && bytes.HasPrefix(e.typ, []byte("response.")) && bytes.HasSuffix(e.typ, []byte(".delta"))
}

func (e *eventReader) read(l *lexer) error {
	return l.members(func(key []byte) (err error) {
		switch string(key) {
		case "choices":
			err = e.choices(l)
		case "usage":
			err = e.readUsage(l)
		case "type":
			if l.peek() == '"' {
				e.typ, err = l.str()
				if string(e.typ) == "error" || string(e.typ) == "response.failed" {
					e.failed = true
				}
			} else {
				err = l.skip()
			}
		case "delta":
			e.delta, err = nonEmpty(l)
		case "error":
			var present bool
			present, err = nonNull(l)
			e.failed = e.failed || present
		case "response":
			err = e.response(l)
		default:
			err = l.skip()
		}
		return err
	})
}

// response reads the "response" object of a Responses event for its usage.
func (e *eventReader) response(l *lexer) error {
	if l.peek() != '{' {
		return l.skip()
	}
	return l.members(func(key []byte) error {
		if string(key) == "usage" {
			return e.readUsage(l)
		}
		return l.skip()
	})
}

// choices reads a "choices" array, looking for a choice that carries output.
func (e *eventReader) choices(l *lexer) error {
	if l.peek() != '[' {
		return l.skip()
	}
	return l.elements(func() error { return e.choice(l, false) })
}

// choice reads one choice (inDelta false) or the "delta" object of one.
func (e *eventReader) choice(l *lexer, inDelta bool) error {
	if l.peek() != '{' {
		return l.skip()
	}
	return l.members(func(key []byte) error {
		switch {
		case !inDelta && string(key) == "delta":
			return e.choice(l, true)
		case !inDelta && string(key) == "index":
			var i int
			err := readCount(l, &i)
			e.otherChoice = e.otherChoice || i != 0
			return err
		case !inDelta && string(key) == "text", inDelta && isOutput(key):
			out, err := nonEmpty(l)
			e.token = e.token || out
			return err
		default:
			return l.skip()
		}
	})
}

// isOutput reports whether a field of a choice's delta carries output.
func isOutput(key []byte) bool {
	switch string(key) {
	case "content", "reasoning_content", "reasoning", "refusal", "tool_calls", "function_call":
		return true
	}
	return false
}

// readUsage reads a usage object of either API; null leaves no usage.
func (e *eventReader) readUsage(l *lexer) error {
	if l.peek() != '{' {
		return l.skip()
	}
	e.hasUsage = true
	e.usage = Usage{}
	return l.members(func(key []byte) error {
		switch string(key) {
		case "prompt_tokens", "input_tokens":
			return readCount(l, &e.usage.PromptTokens)
		case "completion_tokens", "output_tokens":
			return readCount(l, &e.usage.CompletionTokens)
		case "total_tokens":
			return readCount(l, &e.usage.TotalTokens)
		case "prompt_tokens_details", "input_tokens_details":
			return readDetails(l, &e.usage.CachedTokens)
		default:
			return l.skip()
		}
	})
}

// readDetails reads cached_tokens from a token-details object.
func readDetails(l *lexer, cached *int) error {
	if l.peek() != '{' {
		return l.skip()
	}
	return l.members(func(key []byte) error {
		if string(key) == "cached_tokens" {
			return readCount(l, cached)
		}
		return l.skip()
	})
}

// readCount stores a non-negative integer in n; other values leave n alone.
func readCount(l *lexer, n *int) error {
	if c := l.peek(); c != '-' && !isDigit(c) {
		return l.skip()
	}
	v, ok, err := l.count()
	if ok {
		*n = v
	}
	return err
}

// nonEmpty skips a value and reports whether it carries something: a
// non-empty string, array or object, true, or a number.
func nonEmpty(l *lexer) (bool, error) {
	switch l.peek() {
	case '"':
		s, err := l.str()
		return len(s) > 0, err
	case 'n':
		return false, l.lit("null")
	case 'f':
		return false, l.lit("false")
	}
	s, err := l.span()
	if err != nil {
		return false, err
	}
	if len(s) >= 2 && (s[0] == '[' || s[0] == '{') {
		return len(bytes.TrimSpace(s[1:len(s)-1])) > 0, nil
	}
	return true, nil
}

// nonNull skips a value and reports whether it was anything but null.
func nonNull(l *lexer) (bool, error) {
	if l.peek() == 'n' {
		return false, l.lit("null")
	}
	return true, l.skip()
}

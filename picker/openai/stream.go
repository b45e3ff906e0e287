package openai

import (
	"bytes"
	"strings"
)

// Events is a set of things a StreamScanner noticed in the bytes it was fed.
type Events uint8

const (
	// FirstToken means the model produced its first output. In a stream,
	// that is the first event carrying non-empty content, reasoning, refusal
	// or a tool call (or a Responses "response.*.delta" event); for a whole
	// JSON body, its first byte, since the body only comes back once
	// generation is over.
	FirstToken Events = 1 << iota
	// UsageSeen means a usage object was read; Usage returns the latest one.
	UsageSeen
	// Done means the stream sent "data: [DONE]", or the whole JSON body
	// arrived (a valid object; past the limit, an object that closed).
	Done
	// Failed means the model server reported an error in the stream.
	Failed
	// Overflow means one line or event, or a JSON body that is not an
	// object, exceeded the limit; the scanner has stopped reading and reports
	// nothing more.
	Overflow
)

// Has reports whether every event in x is in e.
func (e Events) Has(x Events) bool { return e&x == x }

func (e Events) String() string {
	if e == 0 {
		return "none"
	}
	var b strings.Builder
	for i, name := range [...]string{"first-token", "usage", "done", "failed", "overflow"} {
		if e&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(name)
		}
	}
	return b.String()
}

// Usage is the token accounting a model server reports.
type Usage struct {
	// PromptTokens is prompt_tokens (Responses: input_tokens).
	PromptTokens int
	// CompletionTokens is completion_tokens (Responses: output_tokens).
	CompletionTokens int
	// TotalTokens is total_tokens, as the model server reports it.
	TotalTokens int
	// CachedTokens is prompt_tokens_details.cached_tokens (Responses:
	// input_tokens_details.cached_tokens): prompt tokens served from cache.
	CachedTokens int
}

// DefaultLimit is the most a StreamScanner holds when Limit is zero.
const DefaultLimit = 1 << 20

// StreamScanner reads a response body as it arrives, in chunks split
// anywhere. In streaming mode the body is a text/event-stream; otherwise it is
// one JSON document. The scanner holds only the unfinished line and event of a
// stream, or the body of a JSON response, each capped by Limit; a JSON object
// over Limit is read one top-level member at a time, a member over Limit
// skipped, so that the usage after a large member is still read.
//
// The zero value is ready for a stream; Reset chooses the mode and keeps the
// buffers for reuse. A StreamScanner is not safe for concurrent use.
type StreamScanner struct {
	// Limit caps the bytes held at once; zero means DefaultLimit.
	Limit int

	json    bool   // a whole JSON body rather than a stream
	line    []byte // unfinished line carried across chunks
	data    []byte // data of the current event, or the JSON body so far
	hasData bool   // the current event has a data field
	cr      bool   // the last chunk ended with '\r'
	stopped bool   // overflowed: read nothing more
	once    Events // events reported that are reported only once
	usage   Usage
	outputs int  // events of a stream that carried output
	choices bool // a choice other than the first carried output

	// Where a JSON body stands: nesting depth and string state, so that its
	// end is seen without parsing it chunk by chunk.
	depth         int
	inStr, escape bool
	started       bool // a non-blank byte was seen
	complete      bool // the top-level value closed

	// A JSON object over Limit is read one top-level member at a time
	// (members): data then holds "{" and the current member, and a member
	// over Limit is skipped (skip) rather than held.
	members, skip bool

	// grpc: a gRPC response, read as g says (ResetGRPC).
	grpc bool
	g    grpcScan
}

// Reset prepares s for a new response. Streaming selects event-stream mode;
// choose it from the response's content type (text/event-stream), not from
// the request, since a server answers a failed streaming request with a
// plain JSON error.
func (s *StreamScanner) Reset(streaming bool) {
	*s = StreamScanner{Limit: s.Limit, json: !streaming, line: keep(s.line), data: keep(s.data)}
}

// keepCap is the largest buffer Reset keeps for reuse, so that a scanner kept
// in a pool does not pin the memory of one unusually large response.
const keepCap = 64 << 10

func keep(b []byte) []byte {
	if cap(b) > keepCap {
		return nil
	}
	return b[:0]
}

// Usage returns the latest usage read, zero if none.
func (s *StreamScanner) Usage() Usage { return s.usage }

// OutputEvents returns how many events of a stream carried output: as vLLM
// streams by default, one per step of the model, a token each when it
// decodes one token a step.
func (s *StreamScanner) OutputEvents() int { return s.outputs }

// SeveralChoices reports whether a choice other than the first (index 0)
// carried output: the request asked for several ("n"), decoded side by
// side, so that the tokens and events count every choice's.
func (s *StreamScanner) SeveralChoices() bool { return s.choices }

func (s *StreamScanner) limit() int {
	if s.Limit > 0 {
		return s.Limit
	}
	return DefaultLimit
}

// Feed reads the next chunk of the body and returns what it noticed in it.
// FirstToken, Done, Failed and Overflow are each returned once per response.
func (s *StreamScanner) Feed(chunk []byte) Events {
	if s.stopped {
		return 0
	}
	var ev Events
	switch {
	case s.grpc:
		ev = s.feedGRPC(chunk)
	case s.members:
		ev = s.feedMembers(chunk)
	case s.json:
		ev = s.feedJSON(chunk)
	default:
		ev = s.feedStream(chunk)
	}
	return s.report(ev)
}

// End tells s that the body is over. An unterminated last line and event of a
// stream are read as if they had been terminated, and a JSON body whose end
// was not seen yet is read as it is. A gRPC response's unfinished message
// is dropped.
func (s *StreamScanner) End() Events {
	if s.stopped || s.grpc {
		return 0
	}
	var ev Events
	if s.json {
		if s.started && !s.complete && !s.members {
			s.complete = true
			ev = s.body(s.data)
		}
	} else {
		if len(s.line) > 0 {
			ev = s.processLine(s.line)
			s.line = s.line[:0]
		}
		if !s.stopped {
			ev |= s.dispatch()
		}
	}
	return s.report(ev)
}

func (s *StreamScanner) report(ev Events) Events {
	const onceOnly = FirstToken | Done | Failed | Overflow
	ev &^= s.once & onceOnly
	s.once |= ev & onceOnly
	return ev
}

// overflow stops the scanner and lets go of what it held.
func (s *StreamScanner) overflow() Events {
	s.stopped = true
	s.line, s.data = s.line[:0], s.data[:0]
	return Overflow
}

// feedStream splits the chunk into lines, carrying an unfinished one over.
func (s *StreamScanner) feedStream(chunk []byte) Events {
	var ev Events
	for len(chunk) > 0 && !s.stopped {
		if s.cr {
			s.cr = false
			if chunk[0] == '\n' {
				chunk = chunk[1:]
				continue
			}
		}
		n := lineEnd(chunk)
		if n < 0 {
			if len(s.line)+len(chunk) > s.limit() {
				return ev | s.overflow()
			}
			s.line = append(s.line, chunk...)
			break
		}
		line := chunk[:n]
		if len(s.line)+n > s.limit() {
			return ev | s.overflow()
		}
		if len(s.line) > 0 {
			s.line = append(s.line, line...)
			line = s.line
		}
		if chunk[n] == '\r' {
			if n+1 == len(chunk) {
				s.cr = true
			} else if chunk[n+1] == '\n' {
				n++
			}
		}
		chunk = chunk[n+1:]
		ev |= s.processLine(line)
		s.line = s.line[:0]
	}
	return ev
}

// lineEnd returns the index of the first '\n' or '\r' in b, or -1.
func lineEnd(b []byte) int {
	n := bytes.IndexByte(b, '\n')
	if n < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if r := bytes.IndexByte(b[:n], '\r'); r >= 0 {
		return r
	}
	return n
}

// processLine reads one event-stream line. Only data fields matter; a blank
// line ends the event.
func (s *StreamScanner) processLine(line []byte) Events {
	if len(line) == 0 {
		return s.dispatch()
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	if string(field) != "data" {
		return 0 // a comment, or event, id, retry and unknown fields
	}
	n := len(s.data) + len(value)
	if s.hasData {
		n++
	}
	if n > s.limit() {
		return s.overflow()
	}
	if s.hasData {
		s.data = append(s.data, '\n')
	}
	s.data = append(s.data, value...)
	s.hasData = true
	return 0
}

// dispatch reads the data of the event that just ended.
func (s *StreamScanner) dispatch() Events {
	if !s.hasData {
		return 0
	}
	ev, _ := s.event(s.data)
	s.data, s.hasData = s.data[:0], false
	return ev
}

// inString steps the scan's string state over c, a byte of a JSON body,
// and reports whether c lay inside a string (its closing quote included).
func (s *StreamScanner) inString(c byte) bool {
	if !s.inStr {
		return false
	}
	switch {
	case s.escape:
		s.escape = false
	case c == '\\':
		s.escape = true
	case c == '"':
		s.inStr = false
	}
	return true
}

// feedJSON follows a JSON body's nesting to see where it ends, and reads it
// then.
func (s *StreamScanner) feedJSON(chunk []byte) Events {
	if s.complete {
		return 0
	}
	if !s.started {
		// Blanks before the value are not held: they count against no
		// limit, however many chunks bring them.
		chunk = bytes.TrimLeft(chunk, " \t\n\r")
	}
	var ev Events
	end := -1
scan:
	for i := 0; i < len(chunk); i++ {
		c := chunk[i]
		if s.inString(c) {
			continue
		}
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			continue
		}
		if !s.started {
			s.started = true
			ev |= FirstToken
		}
		switch c {
		case '"':
			s.inStr = true
		case '{', '[':
			s.depth++
		case '}', ']':
			if s.depth > 0 {
				s.depth--
			}
			if s.depth == 0 {
				end = i + 1
				break scan
			}
		}
	}
	part := chunk
	if end >= 0 {
		part = chunk[:end]
	}
	if len(s.data)+len(part) > s.limit() {
		return ev | s.byMembers(part)
	}
	s.data = append(s.data, part...)
	if end >= 0 {
		s.complete = true
		ev |= s.body(s.data)
	}
	return ev
}

// body reads a whole JSON response body: Done if it is a valid JSON object,
// with its usage if it has one.
func (s *StreamScanner) body(b []byte) Events {
	ev, ok := s.event(b)
	s.data = s.data[:0]
	if ok {
		ev |= Done
	}
	return ev
}

// byMembers goes on reading a JSON body that passed the limit with part one
// top-level member at a time, from its start, so that a usage that follows a
// large member (the vectors of an embeddings batch, a long completion) is
// still read. A body that is not an object overflows.
func (s *StreamScanner) byMembers(part []byte) Events {
	held := s.data
	first := bytes.TrimLeft(held, " \t\r\n")
	if len(first) == 0 {
		first = bytes.TrimLeft(part, " \t\r\n")
	}
	if len(first) == 0 || first[0] != '{' {
		return s.overflow()
	}
	s.data = nil // held is read again below: the members go to a buffer of their own
	s.members = true
	s.depth, s.inStr, s.escape = 0, false, false
	ev := s.feedMembers(held)
	return ev | s.feedMembers(part)
}

// feedMembers follows a JSON object's nesting and reads each top-level
// member as it ends, holding at most Limit bytes of it; Done comes when the
// object closes. A member is read as the object {member}, so whatever an
// event's members say (usage, error) is read as in a whole body.
func (s *StreamScanner) feedMembers(chunk []byte) Events {
	if s.complete {
		return 0
	}
	var ev Events
	from := 0 // the bytes of the current member in chunk start here
	for i := 0; i < len(chunk); i++ {
		c := chunk[i]
		if s.inString(c) {
			continue
		}
		switch c {
		case '"':
			s.inStr = true
		case '{', '[':
			s.depth++
			if s.depth == 1 {
				s.data, from = append(s.data[:0], '{'), i+1
			}
		case '}', ']':
			s.depth--
			if s.depth == 0 {
				s.complete = true
				return ev | s.member(chunk[from:i]) | Done
			}
		case ',':
			if s.depth == 1 {
				ev |= s.member(chunk[from:i])
				from = i + 1
			}
		}
	}
	if s.depth > 0 {
		s.hold(chunk[from:])
	}
	return ev
}

// hold keeps b as part of the current member, unless the member passes the
// limit: it is then skipped to its end.
func (s *StreamScanner) hold(b []byte) {
	if s.skip {
		return
	}
	if len(s.data)+len(b) > s.limit() {
		s.skip, s.data = true, s.data[:1]
		return
	}
	s.data = append(s.data, b...)
}

// member reads the member that ends with b, and starts the next one.
func (s *StreamScanner) member(b []byte) Events {
	s.hold(b)
	var ev Events
	if !s.skip {
		ev, _ = s.event(append(s.data, '}'))
	}
	s.skip, s.data = false, s.data[:1]
	return ev
}

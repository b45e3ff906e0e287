package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Request is what the picker needs from a request body. Its byte slices alias
// the body given to Parse and are valid only as long as that body is; Reset
// and Parse keep the Prompt slice's capacity so that a reused Request parses
// without allocating.
type Request struct {
	// Kind is the endpoint the body was parsed for.
	Kind Kind
	// Model is the "model" field, decoded. A Request that parses the same
	// model again reuses the string it made the first time.
	Model string
	// ModelStart and ModelEnd are the offsets in the body of the raw "model"
	// string's content, between its quotes (of the last "model" field when
	// there are several, the one Model was read from).
	ModelStart, ModelEnd int
	// Stream is the "stream" field.
	Stream bool
	// IncludeUsage is "stream_options.include_usage".
	IncludeUsage bool
	// CacheSalt is the raw "cache_salt" string (escapes left as they are), nil
	// when absent. Model servers share cached prefixes only between requests
	// with the same salt, so a prefix index should be keyed by it too.
	CacheSalt []byte
	// Prompt is the prompt as segments in the order a chat template renders
	// them. A segment is either the raw content of a JSON string in the body
	// (escapes left as they are: a client serializes the same text the same
	// way, which is all prefix matching needs), the raw JSON text of a value
	// kept whole (tools, tool calls, non-text content parts, token arrays), or
	// one of the package's static role markers such as "<|user|>\n", so that
	// the same text said in different roles does not look like one prefix.
	// Segments are never empty and must not be modified.
	Prompt [][]byte
	// Input is the raw JSON value of the prompt's field as it is in the
	// body: "messages" of a chat, "prompt" of a completion; nil otherwise.
	// Tools is the raw "tools" array of a chat, nil when absent. A model
	// server's /tokenize endpoint takes both as they are.
	Input, Tools []byte
	// Tokens is the prompt's length in tokens as estimated without a
	// tokenizer, as llm-d estimates it: the text of its strings (message
	// contents, text parts, prompts, instructions; an escape is one
	// character) at BytesPerToken bytes a token, plus one a token id of a
	// token array. Media parts, tools, tool calls and role markers count
	// none, as llm-d counts only string content.
	Tokens int
	// Media tells that a message has a content part other than text (an
	// image, audio, a file): a model server keys the blocks of its
	// placeholder tokens by the media's hash, which its token ids do not
	// show.
	Media bool
	// Encodable tells that a chat message has a content part an encode
	// pod takes apart: an image_url or input_audio part, the types both
	// llm-d's multimodal decider and its sidecar's encode stage act on
	// (the decider also looks for video_url, which the sidecar sends no
	// encoder; the sidecar also sends audio_url, which the decider does
	// not look for).
	Encodable bool
	// InputIDs are a gRPC request's tokenized.input_ids as segments of
	// the body: packed varints, or one unpacked id's varint; nil for any
	// other request. TokenIDs decodes them.
	InputIDs [][]byte

	lastModel string
}

// Reset clears r for another Parse, keeping the Prompt capacity.
func (r *Request) Reset() {
	clear(r.Prompt)
	clear(r.InputIDs)
	*r = Request{Prompt: r.Prompt[:0], InputIDs: r.InputIDs[:0], lastModel: r.lastModel}
}

// PromptLen returns the total length of the prompt segments in bytes.
func (r *Request) PromptLen() int {
	n := 0
	for _, s := range r.Prompt {
		n += len(s)
	}
	return n
}

// Parse reads a request body sent to an endpoint of the given kind into r,
// which it resets first. It checks that the whole body is valid JSON (UTF-8
// included) in the same pass. Errors wrap ErrSyntax, ErrNotObject, ErrTooDeep,
// ErrMissingModel or ErrFieldType; on error r holds partial results. It
// reads what vLLM reads: a leading UTF-8 byte order mark is skipped, and
// "stream" and "stream_options.include_usage" are booleans as pydantic's lax
// mode reads them (1, "true", "yes" and so on).
//
// What becomes the prompt, by kind:
//   - Completions: "prompt" as a string, the strings of an array in order, or
//     a token array as its raw JSON text without the brackets.
//   - ChatCompletions: "tools" first (templates render them in the opening
//     system turn), then each message as its role marker, its text content
//     (a string, or "text" parts and bare strings; other parts such as
//     images as their raw JSON object) and its "tool_calls" as raw JSON.
//   - Responses: "tools", then "instructions" as a system turn, then "input"
//     (a string is a user turn; items with a role or content are turns like
//     chat messages; other items, such as function calls and their outputs,
//     are their raw JSON object).
//   - Embeddings: "input" like the completions prompt.
//   - Unknown: no prompt; model and streaming options only.
func Parse(kind Kind, body []byte, r *Request) error {
	r.Reset()
	r.Kind = kind
	p := parser{r: r}
	p.l.reset(body)
	return p.parse()
}

// parser holds the state of one Parse call.
type parser struct {
	l lexer
	r *Request

	model, modelTok []byte
	tools           []byte // raw JSON array
	instructions    []byte // raw string content
	// text is the bytes of the prompt's text counted so far, escapes one
	// each; instructionsText that of instructions; ids the token ids.
	text, instructionsText, ids int
}

// BytesPerToken is the bytes of text a token stands for when a prompt's
// length is estimated without a tokenizer (llm-d's 0.25 tokens a
// character).
const BytesPerToken = 4

// bom is the UTF-8 byte order mark, which some clients write ahead of a
// body and which the model server's JSON decoder skips.
var bom = []byte("\xef\xbb\xbf")

func (p *parser) parse() error {
	l := &p.l
	if bytes.HasPrefix(l.b, bom) {
		l.i = len(bom)
	}
	start := l.i
	switch l.peek() {
	case '{':
	case '[', '"', 't', 'f', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if err := l.skip(); err != nil {
			return err
		}
		if err := p.end(); err != nil {
			return err
		}
		return fmt.Errorf("%w: got %s", ErrNotObject, (&lexer{b: l.b, i: start}).kindName())
	default:
		return syntaxError(l, "expected a JSON object")
	}
	if err := l.members(p.field); err != nil {
		return err
	}
	if err := p.end(); err != nil {
		return err
	}
	if err := p.setModel(); err != nil {
		return err
	}
	p.prependPreamble()
	p.r.Tokens = (p.text+p.instructionsText)/BytesPerToken + p.ids
	return nil
}

// end checks that only whitespace follows the top-level value.
func (p *parser) end() error {
	p.l.peek()
	if p.l.i != len(p.l.b) {
		return syntaxError(&p.l, "data after the JSON value")
	}
	return nil
}

// field reads the value of one top-level field.
func (p *parser) field(key []byte) error {
	l, r := &p.l, p.r
	switch string(key) {
	case "model":
		switch l.peek() {
		case '"':
			start := l.i
			s, err := l.str()
			p.model, p.modelTok = s, l.b[start:l.i]
			p.r.ModelStart, p.r.ModelEnd = start+1, l.i-1
			return err
		case 'n':
			p.model, p.modelTok = nil, nil
			p.r.ModelStart, p.r.ModelEnd = 0, 0
			return l.lit("null")
		}
		return fieldTypeError("model", l, "a string")
	case "stream":
		v, _, err := l.boolean("stream")
		r.Stream = v
		return err
	case "stream_options":
		return p.streamOptions()
	case "cache_salt":
		switch l.peek() {
		case '"':
			s, err := l.str()
			r.CacheSalt = s
			return err
		case 'n':
			return l.lit("null")
		}
		return fieldTypeError("cache_salt", l, "a string")
	}
	switch r.Kind {
	case ChatCompletions:
		switch string(key) {
		case "messages":
			p.restartPrompt()
			return p.raw(&r.Input, p.messages)
		case "tools":
			return p.raw(&r.Tools, p.toolsField)
		}
	case Completions:
		if string(key) == "prompt" {
			p.restartPrompt()
			return p.raw(&r.Input, func() error { return p.promptValue("prompt") })
		}
	case Embeddings:
		if string(key) == "input" {
			p.restartPrompt()
			return p.promptValue("input")
		}
	case Responses:
		switch string(key) {
		case "input":
			p.restartPrompt()
			return p.input()
		case "instructions":
			return p.instructionsField()
		case "tools":
			return p.toolsField()
		}
	}
	return l.skip()
}

// restartPrompt drops the prompt read so far: a member given twice is read
// by the model server as its last value, and so is it here.
func (p *parser) restartPrompt() {
	clear(p.r.Prompt)
	p.r.Prompt = p.r.Prompt[:0]
	p.text, p.ids = 0, 0
}

// raw runs read on the value at hand and sets *dst to the value's raw JSON
// text in the body.
func (p *parser) raw(dst *[]byte, read func() error) error {
	p.l.peek()
	start := p.l.i
	err := read()
	*dst = p.l.b[start:p.l.i]
	return err
}

func (p *parser) streamOptions() error {
	l := &p.l
	switch l.peek() {
	case 'n':
		return l.lit("null")
	case '{':
	default:
		return fieldTypeError("stream_options", l, "an object")
	}
	return l.members(func(key []byte) (err error) {
		if string(key) == "include_usage" {
			p.r.IncludeUsage, _, err = l.boolean("stream_options.include_usage")
			return err
		}
		return l.skip()
	})
}

func (p *parser) toolsField() error {
	l := &p.l
	switch l.peek() {
	case '[':
		s, err := l.span()
		p.tools = s
		return err
	case 'n':
		return l.lit("null")
	}
	return fieldTypeError("tools", l, "an array")
}

func (p *parser) instructionsField() error {
	l := &p.l
	switch l.peek() {
	case '"':
		s, err := l.str()
		p.instructions, p.instructionsText = s, len(s)-l.escaped
		return err
	case 'n':
		return l.lit("null")
	}
	return fieldTypeError("instructions", l, "a string")
}

// setModel fills r.Model from the raw model string, reusing the string of the
// previous parse when the name is the same.
func (p *parser) setModel() error {
	r := p.r
	if len(p.model) == 0 {
		return fmt.Errorf("%w: the body has no non-empty \"model\" string", ErrMissingModel)
	}
	if bytes.IndexByte(p.model, '\\') < 0 {
		if string(p.model) != r.lastModel {
			r.lastModel = string(p.model)
		}
		r.Model = r.lastModel
		return nil
	}
	var s string
	if err := json.Unmarshal(p.modelTok, &s); err != nil {
		return fmt.Errorf("%w: model: %w", ErrSyntax, err)
	}
	r.Model = s
	return nil
}

// prependPreamble puts the parts a template renders before the conversation
// (tools, then instructions) in front of the prompt, whatever their place in
// the body.
func (p *parser) prependPreamble() {
	var pre [4][]byte
	n := 0
	if len(p.tools) > 0 {
		pre[n], pre[n+1] = markTools, p.tools
		n += 2
	}
	if len(p.instructions) > 0 {
		pre[n], pre[n+1] = markSystem, p.instructions
		n += 2
	}
	if n == 0 {
		return
	}
	r := p.r
	old := len(r.Prompt)
	r.Prompt = append(r.Prompt, pre[:n]...)
	copy(r.Prompt[n:], r.Prompt[:old])
	copy(r.Prompt, pre[:n])
}

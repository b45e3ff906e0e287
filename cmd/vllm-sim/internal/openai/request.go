// Package openai holds the OpenAI-compatible request and response bodies the
// simulator speaks: parsing of completion and chat requests (including the
// prompt text the KV model sees) and the JSON shapes vLLM answers with.
package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrBadRequest marks a request body the server must answer with 400.
var ErrBadRequest = errors.New("bad request")

// StreamOptions is the stream_options object.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Common holds the fields completion and chat requests share.
type Common struct {
	Model               string         `json:"model"`
	MaxTokens           *int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int           `json:"max_completion_tokens,omitempty"`
	Stream              bool           `json:"stream"`
	StreamOptions       *StreamOptions `json:"stream_options,omitempty"`
	// CacheSalt keeps the request's cached blocks apart from those of
	// requests with another salt or none (vLLM's cache_salt).
	CacheSalt *string `json:"cache_salt,omitempty"`
}

// RequestedMaxTokens returns max_completion_tokens, else max_tokens, else 0
// (not set).
func (c *Common) RequestedMaxTokens() int {
	switch {
	case c.MaxCompletionTokens != nil:
		return *c.MaxCompletionTokens
	case c.MaxTokens != nil:
		return *c.MaxTokens
	}
	return 0
}

// IncludeUsage reports whether a stream ends with a usage chunk.
func (c *Common) IncludeUsage() bool {
	return c.Stream && c.StreamOptions != nil && c.StreamOptions.IncludeUsage
}

func (c *Common) validate() error {
	if c.CacheSalt != nil && *c.CacheSalt == "" {
		return fmt.Errorf("%w: cache_salt, when given, must not be empty", ErrBadRequest)
	}
	for name, v := range map[string]*int{"max_tokens": c.MaxTokens, "max_completion_tokens": c.MaxCompletionTokens} {
		if v != nil && *v < 1 {
			return fmt.Errorf("%w: %s must be at least 1, got %d", ErrBadRequest, name, *v)
		}
	}
	return nil
}

// CompletionRequest is a POST /v1/completions body.
type CompletionRequest struct {
	Common
	Prompt Prompt `json:"prompt"`
}

// Prompt is a completion prompt: a string or an array of strings, each of
// which is served as its own choice.
type Prompt []string

// UnmarshalJSON implements json.Unmarshaler.
func (p *Prompt) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*p = Prompt{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return errors.New("prompt must be a string or an array of strings")
	}
	*p = many
	return nil
}

// ParseCompletion decodes and checks a completion request.
func ParseCompletion(body []byte) (*CompletionRequest, error) {
	var r CompletionRequest
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	if len(r.Prompt) == 0 {
		return nil, fmt.Errorf("%w: prompt is required", ErrBadRequest)
	}
	for i, p := range r.Prompt {
		if p == "" {
			return nil, fmt.Errorf("%w: prompt %d is empty", ErrBadRequest, i)
		}
	}
	return &r, nil
}

// ChatRequest is a POST /v1/chat/completions body.
type ChatRequest struct {
	Common
	Messages []Message `json:"messages"`
	// AddGenerationPrompt false leaves the reply's opening out of the
	// prompt text, as vLLM's add_generation_prompt does; unset is true.
	AddGenerationPrompt *bool `json:"add_generation_prompt,omitempty"`
}

// Message is one chat message.
type Message struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// Content is a message's text: a string, null, or an array of parts of which
// the "text" parts count (joined by newlines, as vLLM does).
type Content string

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// UnmarshalJSON implements json.Unmarshaler.
func (c *Content) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*c = ""
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*c = Content(s)
		return nil
	}
	var parts []contentPart
	if err := json.Unmarshal(data, &parts); err != nil {
		return errors.New("content must be a string or an array of content parts")
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	*c = Content(strings.Join(texts, "\n"))
	return nil
}

// ParseChat decodes and checks a chat request.
func ParseChat(body []byte) (*ChatRequest, error) {
	var r ChatRequest
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	if len(r.Messages) == 0 {
		return nil, fmt.Errorf("%w: messages is required", ErrBadRequest)
	}
	for i, m := range r.Messages {
		if m.Role == "" {
			return nil, fmt.Errorf("%w: message %d has no role", ErrBadRequest, i)
		}
	}
	return &r, nil
}

// PromptText is the text the model reads for a chat: each message as
// "<|role|>\n" + content + "\n", in order, then "<|assistant|>\n" for the
// reply unless add_generation_prompt is false. A later turn of the same
// conversation therefore extends the earlier turn's prompt text, and shares
// its cached blocks.
func (r *ChatRequest) PromptText() string {
	var b strings.Builder
	for _, m := range r.Messages {
		writeTurn(&b, m.Role, string(m.Content))
	}
	if r.AddGenerationPrompt == nil || *r.AddGenerationPrompt {
		b.WriteString("<|assistant|>\n")
	}
	return b.String()
}

func writeTurn(b *strings.Builder, role, content string) {
	b.WriteString("<|")
	b.WriteString(role)
	b.WriteString("|>\n")
	b.WriteString(content)
	b.WriteString("\n")
}

func decode(body []byte, into any) error {
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return nil
}

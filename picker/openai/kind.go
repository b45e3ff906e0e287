package openai

import "strings"

// Kind is the OpenAI endpoint a request was sent to.
type Kind uint8

const (
	// Unknown is any other path: Parse reads only the model and the
	// streaming options of its body.
	Unknown Kind = iota
	// Completions is /v1/completions.
	Completions
	// ChatCompletions is /v1/chat/completions.
	ChatCompletions
	// Responses is /v1/responses.
	Responses
	// Embeddings is /v1/embeddings.
	Embeddings
)

func (k Kind) String() string {
	switch k {
	case Completions:
		return "completions"
	case ChatCompletions:
		return "chat_completions"
	case Responses:
		return "responses"
	case Embeddings:
		return "embeddings"
	default:
		return "unknown"
	}
}

// KindOf returns the kind of the request whose :path header is path. The query
// string, a fragment and a trailing slash are ignored, and so is anything before
// the endpoint's own name, so "/openai/v1/chat/completions?x=1" is a chat.
func KindOf(path string) Kind {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	path = strings.TrimSuffix(path, "/")
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return ChatCompletions
	case strings.HasSuffix(path, "/completions"):
		return Completions
	case strings.HasSuffix(path, "/responses"):
		return Responses
	case strings.HasSuffix(path, "/embeddings"):
		return Embeddings
	default:
		return Unknown
	}
}

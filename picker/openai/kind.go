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
	// GRPCGenerate is the Generate method of vLLM's gRPC engine API
	// (GeneratePath): a GenerateRequest message, answered by a stream of
	// GenerateResponse messages (ParseGRPC).
	GRPCGenerate
	// GRPCEmbed is the Embed method of vLLM's gRPC engine API (EmbedPath):
	// an EmbedRequest message, answered by one EmbedResponse.
	GRPCEmbed
)

// The gRPC service of vLLM's engine API and the paths of the methods that
// carry a prompt. Its other methods (HealthCheck, Abort, GetModelInfo,
// GetServerInfo) have the service's path too, and no prompt: they are of
// kind Unknown.
const (
	grpcService  = "vllm.grpc.engine.VllmEngine"
	GeneratePath = "/" + grpcService + "/Generate"
	EmbedPath    = "/" + grpcService + "/Embed"
)

// GRPC reports whether k is a method of vLLM's gRPC engine API, whose body
// is read by ParseGRPC rather than Parse.
func (k Kind) GRPC() bool { return k == GRPCGenerate || k == GRPCEmbed }

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
	case GRPCGenerate:
		return "grpc_generate"
	case GRPCEmbed:
		return "grpc_embed"
	default:
		return "unknown"
	}
}

// KindOf returns the kind of the request whose :path header is path. The query
// string, a fragment and a trailing slash are ignored, and so is anything before
// the endpoint's own name, so "/openai/v1/chat/completions?x=1" is a chat.
// A gRPC method is its exact path, as gRPC names it: GeneratePath or
// EmbedPath.
func KindOf(path string) Kind {
	switch path {
	case GeneratePath:
		return GRPCGenerate
	case EmbedPath:
		return GRPCEmbed
	}
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

package openai

import "testing"

func TestKindOf(t *testing.T) {
	tests := map[string]struct {
		path string
		want Kind
	}{
		"chat":                      {path: "/v1/chat/completions", want: ChatCompletions},
		"chat with query":           {path: "/v1/chat/completions?api-version=1", want: ChatCompletions},
		"chat trailing slash":       {path: "/v1/chat/completions/", want: ChatCompletions},
		"chat behind a prefix":      {path: "/openai/v1/chat/completions", want: ChatCompletions},
		"completions":               {path: "/v1/completions", want: Completions},
		"completions fragment":      {path: "/v1/completions#x", want: Completions},
		"responses":                 {path: "/v1/responses", want: Responses},
		"embeddings":                {path: "/v1/embeddings?x=/v1/chat/completions", want: Embeddings},
		"models":                    {path: "/v1/models", want: Unknown},
		"query names a kind":        {path: "/v1/tokenize?next=/v1/completions", want: Unknown},
		"empty":                     {path: "", want: Unknown},
		"grpc generate":             {path: "/vllm.grpc.engine.VllmEngine/Generate", want: GRPCGenerate},
		"grpc embed":                {path: "/vllm.grpc.engine.VllmEngine/Embed", want: GRPCEmbed},
		"grpc health check":         {path: "/vllm.grpc.engine.VllmEngine/HealthCheck", want: Unknown},
		"grpc path behind a prefix": {path: "/x/vllm.grpc.engine.VllmEngine/Generate", want: Unknown},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := KindOf(tc.path); got != tc.want {
				t.Errorf("KindOf(%q) = %v, want %v", tc.path, got, tc.want)
			}
		})
	}
}

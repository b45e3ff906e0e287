package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/kvcache"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/openai"
)

type tokenized struct {
	Count       int             `json:"count"`
	MaxModelLen int             `json:"max_model_len"`
	Tokens      []uint32        `json:"tokens"`
	TokenStrs   json.RawMessage `json:"token_strs"`
}

// The ids /tokenize gives are those of the text the generation endpoint
// caches for the same body, and as many as its usage counts.
func TestTokenizeGivesTheCachedText(t *testing.T) {
	base := startSim(t, defaultSim()) // 512 blocks of 4 tokens
	cases := map[string]struct {
		body     string
		endpoint string // the generation endpoint of the same body
		text     string
	}{
		"completion": {
			body: `{"model":"sim-model","prompt":"hello world","add_special_tokens":true}`, endpoint: "/v1/completions",
			text: "hello world",
		},
		"no model is the base model": {body: `{"prompt":"abcd"}`, endpoint: "/v1/completions", text: "abcd"},
		"array prompt: the first": {
			body: `{"model":"sim-model","prompt":["first prompt","second"]}`,
			text: "first prompt",
		},
		"chat": {
			body:     `{"model":"sim-model","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"add_special_tokens":false}`,
			endpoint: "/v1/chat/completions",
			text:     "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n",
		},
		"chat without the generation prompt": {
			body:     `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}`,
			endpoint: "/v1/chat/completions",
			text:     "<|user|>\nhi\n",
		},
		"null messages is a completion": {body: `{"messages":null,"prompt":"p"}`, text: "p"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got tokenized
			if status := postJSON(t, base+"/tokenize", tc.body, &got); status != http.StatusOK {
				t.Fatalf("status %d", status)
			}
			ids := kvcache.TokenIDs(tc.text, nil)
			want := tokenized{Count: len(ids), MaxModelLen: 2048, Tokens: ids, TokenStrs: json.RawMessage("null")}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tc.endpoint == "" {
				return
			}
			var gen struct{ Usage openai.Usage }
			if status := postJSON(t, base+tc.endpoint, tc.body, &gen); status != http.StatusOK || gen.Usage.PromptTokens != got.Count {
				t.Errorf("%s: status %d, %d prompt tokens, want 200 and %d", tc.endpoint, status, gen.Usage.PromptTokens, got.Count)
			}
		})
	}
}

// /tokenize refuses what the generation endpoints refuse, with their
// bodies.
func TestTokenizeErrors(t *testing.T) {
	base := startSim(t, defaultSim())
	cases := map[string]struct {
		body       string
		endpoint   string // answers the same body with the same error
		wantStatus int
	}{
		"unknown model":      {body: `{"model":"gpt-x","prompt":"a"}`, endpoint: "/v1/completions", wantStatus: 404},
		"unknown chat model": {body: `{"model":"gpt-x","messages":[{"role":"user","content":"a"}]}`, endpoint: "/v1/chat/completions", wantStatus: 404},
		"bad json":           {body: `{"prompt":`, wantStatus: 400},
		"no prompt":          {body: `{"model":"sim-model"}`, endpoint: "/v1/completions", wantStatus: 400},
		"no messages":        {body: `{"messages":[]}`, endpoint: "/v1/chat/completions", wantStatus: 400},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status, body := postRaw(t, base+"/tokenize", tc.body)
			var got openai.ErrorResponse
			if err := json.Unmarshal(body, &got); err != nil || status != tc.wantStatus || got.Error.Code != tc.wantStatus {
				t.Fatalf("status %d body %s (%v), want %d", status, body, err, tc.wantStatus)
			}
			if tc.endpoint == "" {
				return
			}
			if _, want := postRaw(t, base+tc.endpoint, tc.body); !bytes.Equal(want, body) {
				t.Errorf("body %s, want %s's %s", body, tc.endpoint, want)
			}
		})
	}
}

// postRaw posts body and returns the status and the answer.
func postRaw(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp := post(t.Context(), t, url, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s answer: %v", url, err)
	}
	return resp.StatusCode, b
}

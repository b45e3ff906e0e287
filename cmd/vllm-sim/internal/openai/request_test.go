package openai

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseCompletion(t *testing.T) {
	cases := map[string]struct {
		body       string
		wantPrompt Prompt
		wantMax    int
		wantUsage  bool
		wantErr    bool
	}{
		"string prompt": {
			body:       `{"model":"m","prompt":"hello","max_tokens":5}`,
			wantPrompt: Prompt{"hello"}, wantMax: 5,
		},
		"array prompt with usage": {
			body:       `{"model":"m","prompt":["a","b"],"stream":true,"stream_options":{"include_usage":true}}`,
			wantPrompt: Prompt{"a", "b"}, wantUsage: true,
		},
		"max_completion_tokens wins": {
			body:       `{"prompt":"x","max_tokens":5,"max_completion_tokens":7}`,
			wantPrompt: Prompt{"x"}, wantMax: 7,
		},
		"usage needs stream": {body: `{"prompt":"x","stream_options":{"include_usage":true}}`, wantPrompt: Prompt{"x"}},
		"token ids rejected": {body: `{"prompt":[1,2,3]}`, wantErr: true},
		"missing prompt":     {body: `{"model":"m"}`, wantErr: true},
		"empty prompt":       {body: `{"prompt":""}`, wantErr: true},
		"zero max tokens":    {body: `{"prompt":"x","max_tokens":0}`, wantErr: true},
		"salted":             {body: `{"prompt":"x","cache_salt":"tenant-a"}`, wantPrompt: Prompt{"x"}},
		"empty salt":         {body: `{"prompt":"x","cache_salt":""}`, wantErr: true},
		"not json":           {body: `{"prompt":`, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseCompletion([]byte(tc.body))
			if tc.wantErr {
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("err = %v, want ErrBadRequest", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCompletion: %v", err)
			}
			if diff := cmp.Diff(tc.wantPrompt, got.Prompt); diff != "" {
				t.Errorf("prompt (-want +got):\n%s", diff)
			}
			if got.RequestedMaxTokens() != tc.wantMax || got.IncludeUsage() != tc.wantUsage {
				t.Errorf("max=%d usage=%v, want %d %v", got.RequestedMaxTokens(), got.IncludeUsage(), tc.wantMax, tc.wantUsage)
			}
		})
	}
}

func TestParseChatPromptText(t *testing.T) {
	cases := map[string]struct {
		body    string
		want    string
		wantErr bool
	}{
		"string contents": {
			body: `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`,
			want: "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n",
		},
		"text parts joined, others skipped": {
			body: `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]}]}`,
			want: "<|user|>\na\nb\n<|assistant|>\n",
		},
		"null content": {
			body: `{"messages":[{"role":"assistant","content":null},{"role":"user","content":"q"}]}`,
			want: "<|assistant|>\n\n<|user|>\nq\n<|assistant|>\n",
		},
		"generation prompt asked for": {
			body: `{"messages":[{"role":"user","content":"q"}],"add_generation_prompt":true}`,
			want: "<|user|>\nq\n<|assistant|>\n",
		},
		"no generation prompt": {
			body: `{"messages":[{"role":"user","content":"q"}],"add_generation_prompt":false}`,
			want: "<|user|>\nq\n",
		},
		"no messages":     {body: `{"model":"m","messages":[]}`, wantErr: true},
		"no role":         {body: `{"messages":[{"content":"x"}]}`, wantErr: true},
		"content object":  {body: `{"messages":[{"role":"user","content":{"a":1}}]}`, wantErr: true},
		"negative tokens": {body: `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":-1}`, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseChat([]byte(tc.body))
			if tc.wantErr {
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("err = %v, want ErrBadRequest", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseChat: %v", err)
			}
			if diff := cmp.Diff(tc.want, got.PromptText()); diff != "" {
				t.Errorf("prompt text (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextTurnExtendsThePromptText(t *testing.T) {
	turn1, _ := ParseChat([]byte(`{"messages":[{"role":"user","content":"hi"}]}`))
	turn2, _ := ParseChat([]byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"more"}]}`))
	a, b := turn1.PromptText(), turn2.PromptText()
	if len(b) < len(a) || b[:len(a)] != a {
		t.Errorf("turn 2 %q does not start with turn 1 %q", b, a)
	}
}

func FuzzParseCompletion(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":"hello","max_tokens":5,"stream":true}`))
	f.Add([]byte(`{"prompt":["a","b"],"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"prompt":[1,2]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseCompletion(body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v is not ErrBadRequest", err)
			}
			return
		}
		if len(r.Prompt) == 0 || r.RequestedMaxTokens() < 0 {
			t.Fatalf("accepted request without prompt or with negative max: %+v", r)
		}
	})
}

func FuzzParseChat(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"max_tokens":3}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":null}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseChat(body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v is not ErrBadRequest", err)
			}
			return
		}
		if len(r.Messages) == 0 || r.PromptText() == "" {
			t.Fatalf("accepted chat with no messages: %+v", r)
		}
	})
}

package server

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/openai"
)

// FuzzPrefiller checks that a prefill pod read from the header is one the
// sidecar can call: a URL of that host and a port from 1 to 65535, with
// nothing else.
func FuzzPrefiller(f *testing.F) {
	for _, s := range []string{"10.0.0.1:8000", "http://pod:80, other:1", "[::1]:8000", "", " , x", "h:0", "h:65536", "u@h:1", "h:1/x", "h:01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		h := http.Header{}
		h.Set(PrefillerHeader, value)
		hp, err := prefiller(h)
		if err != nil || hp == "" {
			return
		}
		u, err := url.Parse("http://" + hp)
		if err != nil || u.Host != hp || u.Path != "" || u.User != nil || u.Hostname() == "" {
			t.Fatalf("header %q gave %q, which is not a URL's host:port (%+v, %v)", value, hp, u, err)
		}
		if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
			t.Fatalf("header %q gave port %q", value, u.Port())
		}
	})
}

// FuzzPrefillBody checks that the prefill pod's request is the client's,
// read the same way, but for one token, not streamed, with a remote decode
// asked for.
func FuzzPrefillBody(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":"hello","max_tokens":9,"stream":true,"stream_options":{"include_usage":true}}`), false)
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3,"cache_salt":"s"}`), true)
	f.Add([]byte(`{"prompt":["a","b"],"Stream":true,"MAX_TOKENS":5,"stream_Options":{"include_usage":true}}`), false)
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		parse := func(b []byte) (*openai.Common, any, error) {
			if chat {
				r, err := openai.ParseChat(b)
				if err != nil {
					return nil, nil, err
				}
				return &r.Common, r.PromptText(), nil
			}
			r, err := openai.ParseCompletion(b)
			if err != nil {
				return nil, nil, err
			}
			return &r.Common, r.Prompt, nil
		}
		c, prompt, err := parse(body)
		if err != nil {
			return
		}
		pbody, err := prefillBody(body)
		if err != nil {
			t.Fatalf("prefillBody(%q) of a valid request: %v", body, err)
		}
		pc, pprompt, err := parse(pbody)
		if err != nil {
			t.Fatalf("prefill body %q of %q does not parse: %v", pbody, body, err)
		}
		if pc.RequestedMaxTokens() != 1 || pc.Stream || pc.IncludeUsage() {
			t.Fatalf("prefill body %q asks for %d tokens, stream %v, usage %v; want 1 token, not streamed",
				pbody, pc.RequestedMaxTokens(), pc.Stream, pc.IncludeUsage())
		}
		if pc.Model != c.Model || !cmp.Equal(pc.CacheSalt, c.CacheSalt) || !cmp.Equal(pprompt, prompt) {
			t.Fatalf("prefill body %q reads apart from %q", pbody, body)
		}
		var fields struct {
			KV struct {
				DoRemoteDecode bool `json:"do_remote_decode"`
			} `json:"kv_transfer_params"`
		}
		if err := json.Unmarshal(pbody, &fields); err != nil || !fields.KV.DoRemoteDecode {
			t.Fatalf("prefill body %q asks for no remote decode (%v)", pbody, err)
		}
	})
}

// FuzzCheckPrefillAnswer checks that only JSON objects pass as the prefill
// pod's answer.
func FuzzCheckPrefillAnswer(f *testing.F) {
	for _, s := range []string{`{"kv_transfer_params":{"do_remote_prefill":true}}`, `null`, `[]`, `{}`, `prefilled`, ` {"a":1} `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if checkPrefillAnswer(body) != nil {
			return
		}
		if !json.Valid(body) || !strings.HasPrefix(strings.TrimSpace(string(body)), "{") {
			t.Fatalf("answer %q passed, want only JSON objects", body)
		}
	})
}

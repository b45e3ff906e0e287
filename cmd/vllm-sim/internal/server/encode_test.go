package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// postEncoded posts a chat body to url naming encoders in EncodersHeader,
// and returns the status.
func postEncoded(t *testing.T, url, encoders, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(EncodersHeader, encoders)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// mediaChat has two distinct images, one of them twice, and an audio clip.
const mediaChat = `{"model":"sim-model","stream":true,"stream_options":{"include_usage":true},"max_tokens":3,"messages":[` +
	`{"role":"user","content":[{"type":"text","text":"compare"},{"type":"image_url","image_url":{"url":"http://img/a.png"}},` +
	`{"type":"image_url","image_url":{"url":"http://img/b.png"}}]},` +
	`{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://img/a.png"}},{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]}`

// A chat naming encoders has each distinct media item sent to them, in
// turn, before it is served here; a text chat naming them sends nothing.
func TestTheSidecarSendsEachMediaItemToTheEncodersFirst(t *testing.T) {
	dec, e1, e2 := startSim(t, defaultSim()), startSim(t, defaultSim()), startSim(t, defaultSim())
	if status := postEncoded(t, dec+"/v1/chat/completions", hostPort(e1)+", "+hostPort(e2), mediaChat); status != http.StatusOK {
		t.Fatalf("status %d, want 200", status)
	}
	if got := simStats(t, dec).Encoded; got != 3 {
		t.Errorf("the decode pod counts %d items encoded, want 3 (a, b and the audio; a once)", got)
	}
	if r1, r2 := simStats(t, e1).Requests, simStats(t, e2).Requests; r1 != 2 || r2 != 1 {
		t.Errorf("the encoders served %d and %d requests, want 2 and 1 (items in turn)", r1, r2)
	}
	if got := simStats(t, dec).Requests; got != 1 {
		t.Errorf("the decode pod served %d requests, want 1", got)
	}
	text := `{"model":"sim-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	if status := postEncoded(t, dec+"/v1/chat/completions", hostPort(e1), text); status != http.StatusOK {
		t.Fatalf("a text chat: status %d, want 200", status)
	}
	if got := simStats(t, e1).Requests; got != 2 {
		t.Errorf("after a text chat encoder 1 served %d requests, want still 2", got)
	}
}

// An encoder that cannot be reached fails the request with 502, as llm-d's
// sidecar does, and a malformed entry is refused with 400; neither reaches
// the engine here.
func TestAFailedEncoderFailsTheRequest(t *testing.T) {
	dec := startSim(t, defaultSim())
	if status := postEncoded(t, dec+"/v1/chat/completions", "127.0.0.1:1", mediaChat); status != http.StatusBadGateway {
		t.Errorf("an unreachable encoder: status %d, want 502", status)
	}
	if status := postEncoded(t, dec+"/v1/chat/completions", "not a pod", mediaChat); status != http.StatusBadRequest {
		t.Errorf("a malformed encoder: status %d, want 400", status)
	}
	if st := simStats(t, dec); st.Requests != 0 || st.EncodeFailures != 1 {
		t.Errorf("engine requests %d, encode failures %d; want 0 and 1", st.Requests, st.EncodeFailures)
	}
}

// FuzzEncoders checks that every encoder read from the header is one the
// sidecar can call, and that each request made for an encoder is a JSON
// object of one user message holding one media part, for one token, not
// streamed.
func FuzzEncoders(f *testing.F) {
	f.Add("10.0.0.1:8000, 10.0.0.2:8000", []byte(mediaChat))
	f.Add(" , [::1]:1,", []byte(`{"messages":[{"role":"user","content":[{"type":"audio_url","audio_url":{"url":"x"}},{"type":"audio_url","audio_url":{"url":"x"}}]}]}`))
	f.Add("h:0", []byte(`{"messages":"x"}`))
	f.Fuzz(func(t *testing.T, value string, body []byte) {
		h := http.Header{}
		h.Set(EncodersHeader, value)
		if pods, err := encoders(h); err == nil {
			for _, p := range pods {
				if !validHostPort(p) {
					t.Fatalf("header %q gave encoder %q, not a host:port", value, p)
				}
			}
		}
		bodies, err := encodeBodies(body)
		if err != nil {
			return
		}
		for _, b := range bodies {
			var req struct {
				Messages []struct {
					Role    string            `json:"role"`
					Content []json.RawMessage `json:"content"`
				} `json:"messages"`
				MaxTokens     int             `json:"max_tokens"`
				Stream        bool            `json:"stream"`
				StreamOptions json.RawMessage `json:"stream_options"`
			}
			if err := json.Unmarshal(b, &req); err != nil {
				t.Fatalf("an encoder request of %q is no JSON object: %v", body, err)
			}
			if len(req.Messages) != 1 || req.Messages[0].Role != "user" || len(req.Messages[0].Content) != 1 || req.MaxTokens != 1 || req.Stream || req.StreamOptions != nil {
				t.Fatalf("an encoder request of %q is %s", body, b)
			}
		}
	})
}

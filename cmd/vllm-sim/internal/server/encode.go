package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// EncodersHeader names the pods that encode a request's multimodal inputs
// before its prefill, as llm-d's routing sidecar reads it: a
// comma-separated list of host:port.
const EncodersHeader = "x-encoder-hosts-ports"

// encodeTypes are the content parts llm-d's sidecar sends to an encoder.
var encodeTypes = map[string]bool{"image_url": true, "audio_url": true, "input_audio": true}

// encoders returns the pods a request's EncodersHeader names, in order;
// none without the header. An empty entry is skipped; any other that is
// not a host:port is an error.
func encoders(h http.Header) ([]string, error) {
	values := h.Values(EncodersHeader)
	if len(values) == 1 {
		values = strings.Split(values[0], ",")
	}
	var out []string
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if !validHostPort(v) {
			return nil, fmt.Errorf("%s entry %q is not a host:port", EncodersHeader, v)
		}
		out = append(out, v)
	}
	return out, nil
}

// encodeBodies returns, for each multimodal item of a chat body's messages
// (an image_url, audio_url or input_audio part; an image or audio URL
// seen before is sent once), the request llm-d's sidecar sends an encoder:
// the client's body with messages one user message of that part alone,
// max_tokens 1, stream false and no stream_options.
func encodeBodies(body []byte) ([][]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	var messages []struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(fields["messages"], &messages); err != nil || len(messages) == 0 {
		return nil, nil //nolint:nilerr // no messages, no media: nothing to encode
	}
	var out [][]byte
	seen := map[string]bool{}
	for _, m := range messages {
		var parts []json.RawMessage
		if json.Unmarshal(m.Content, &parts) != nil {
			continue // a string content has no media
		}
		for _, part := range parts {
			var p struct {
				Type     string `json:"type"`
				ImageURL struct {
					URL string `json:"url"`
				} `json:"image_url"`
				AudioURL struct {
					URL string `json:"url"`
				} `json:"audio_url"`
			}
			if json.Unmarshal(part, &p) != nil || !encodeTypes[p.Type] {
				continue
			}
			if url := p.ImageURL.URL + p.AudioURL.URL; url != "" {
				if seen[url] {
					continue
				}
				seen[url] = true
			}
			msg, err := json.Marshal([]map[string]any{{"role": "user", "content": []json.RawMessage{part}}})
			if err != nil {
				return nil, err
			}
			f := make(map[string]json.RawMessage, len(fields)+1)
			for k, v := range fields {
				f[k] = v
			}
			f["messages"], f["max_tokens"], f["stream"] = msg, json.RawMessage("1"), json.RawMessage("false")
			delete(f, "stream_options")
			b, err := json.Marshal(f)
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
	}
	return out, nil
}

// encode plays the encode step of llm-d's sidecar: each multimodal item
// of the request goes to an encoder it names (the i-th item to the
// (i mod n)-th), all at once, as a chat completion; it reports whether the
// request goes on. An encoder that fails, answers other than 2xx or takes
// longer than the prefill timeout fails the request with 502, as llm-d's
// sidecar does; a request without media goes on without a call.
func (s *Server) encode(w http.ResponseWriter, r *http.Request, body []byte) bool {
	pods, err := encoders(r.Header)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return false
	}
	if len(pods) == 0 {
		return true
	}
	bodies, err := encodeBodies(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return false
	}
	if len(bodies) == 0 {
		return true
	}
	ctx := r.Context()
	errs := make([]error, len(bodies))
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Go(func() {
			errs[i] = s.callEncoder(ctx, "http://"+pods[i%len(pods)]+"/v1/chat/completions", b)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false // the client left: nobody to answer
	}
	for _, err := range errs {
		if err != nil {
			s.encodeFailures.Add(1)
			writeError(w, http.StatusBadGateway, "", "encoder: "+err.Error())
			return false
		}
	}
	s.encoded.Add(int64(len(bodies)))
	return true
}

// callEncoder posts one item's request to target within the prefill
// timeout, and fails unless the answer is 2xx.
func (s *Server) callEncoder(ctx context.Context, target string, body []byte) error {
	status, answer, err := s.callPrefill(ctx, target, body)
	switch {
	case err != nil:
		return err
	case status < http.StatusOK || status >= http.StatusMultipleChoices:
		return fmt.Errorf("%s answered %d: %s", target, status, answer)
	}
	return nil
}

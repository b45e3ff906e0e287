package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/kvcache"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/openai"
)

// tokenizeResponse is vLLM's answer to POST /tokenize.
type tokenizeResponse struct {
	Count       int       `json:"count"`
	MaxModelLen int       `json:"max_model_len"`
	Tokens      []uint32  `json:"tokens"`
	TokenStrs   *[]string `json:"token_strs"`
}

// handleTokenize answers vLLM's POST /tokenize with the token ids
// (kvcache.TokenIDs) of the text the KV cache would hold for the same body
// sent to /v1/chat/completions or /v1/completions (tokenizeText).
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, w)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	model, text, err := tokenizeText(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	if _, _, ok := s.resolve(model); !ok {
		writeError(w, http.StatusNotFound, "model", "The model `"+model+"` does not exist.")
		return
	}
	ids := kvcache.TokenIDs(text, nil)
	writeJSON(w, http.StatusOK, tokenizeResponse{Count: len(ids), MaxModelLen: s.maxModelLen(), Tokens: ids})
}

// tokenizeText returns the model a /tokenize body names and the text to
// tokenize: for a body with messages, the chat's prompt text (with the
// reply's opening unless add_generation_prompt is false); otherwise the
// completion prompt, the first one of an array, which is what the
// completion endpoint caches for its first choice (each prompt of an array
// runs as a sequence of its own). Other fields are ignored.
func tokenizeText(body []byte) (model, text string, err error) {
	var probe struct {
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		return "", "", fmt.Errorf("%w: %w", openai.ErrBadRequest, err)
	}
	if len(probe.Messages) > 0 && !bytes.Equal(probe.Messages, []byte("null")) {
		req, err := openai.ParseChat(body)
		if err != nil {
			return "", "", err
		}
		return req.Model, req.PromptText(), nil
	}
	req, err := openai.ParseCompletion(body)
	if err != nil {
		return "", "", err
	}
	return req.Model, req.Prompt[0], nil
}

// maxModelLen is the most tokens a request (prompt plus output) may have:
// the whole KV pool, beyond which the engine refuses it (engine.ErrTooLarge).
func (s *Server) maxModelLen() int {
	cfg := s.cfg.Engine.Config()
	return cfg.NumGPUBlocks * cfg.BlockSize
}

package server

import (
	"encoding/json"
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

// handleTokenize answers vLLM's POST /tokenize: the token ids of the text
// the KV cache would hold for the same request to /v1/chat/completions (a
// body with "messages", rendered as the chat endpoint renders it, with the
// reply's opening) or to /v1/completions (its "prompt", the first one of an
// array).
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, w)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	var probe struct {
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	var model, text string
	if probe.Messages != nil {
		req, err := openai.ParseChat(body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "", err.Error())
			return
		}
		model, text = req.Model, req.PromptText()
	} else {
		req, err := openai.ParseCompletion(body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "", err.Error())
			return
		}
		model, text = req.Model, req.Prompt[0]
	}
	if _, _, ok := s.resolve(model); !ok {
		writeError(w, http.StatusNotFound, "model", "The model `"+model+"` does not exist.")
		return
	}
	cfg := s.cfg.Engine.Config()
	ids := kvcache.TokenIDs(text, nil)
	writeJSON(w, http.StatusOK, tokenizeResponse{Count: len(ids), MaxModelLen: cfg.NumGPUBlocks * cfg.BlockSize, Tokens: ids})
}

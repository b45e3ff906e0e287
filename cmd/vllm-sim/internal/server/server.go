// Package server is the simulator's HTTP face: the OpenAI-compatible
// completion and chat endpoints served from the engine, vLLM's Prometheus
// metrics, and the /sim endpoints tests and benchmarks use to read totals
// and flip faults.
//
// Latency histograms (vllm:time_to_first_token_seconds,
// vllm:e2e_request_latency_seconds, vllm:request_prefill_time_seconds,
// vllm:inter_token_latency_seconds) are in real wall-clock seconds as the
// HTTP handler sees them, so with a time scale of 0.01 they read 100× lower
// than the simulated times; /sim/stats reports simulated time separately.
package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/engine"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/faults"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/openai"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 16 << 20

// Config is what a Server serves.
type Config struct {
	// Model is the served model name.
	Model string
	// Engine runs the sequences; its Run loop is owned by the caller.
	Engine *engine.Engine
	// Faults is the fault state (default: no faults).
	Faults *faults.State
	// DefaultMaxTokens applies when a request sets no limit (default 16).
	DefaultMaxTokens int
	// MaxTokensCap clamps every request's limit (default 4096).
	MaxTokensCap int
}

// Server answers HTTP requests. Create it with New.
type Server struct {
	cfg      Config
	mux      *http.ServeMux
	metrics  *metrics
	ids      atomic.Uint64
	injected atomic.Int64
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil || cfg.Model == "" {
		return nil, errors.New("server: engine and model are required")
	}
	if cfg.Faults == nil {
		cfg.Faults = faults.NewState(faults.None(), 0)
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 16
	}
	if cfg.MaxTokensCap <= 0 {
		cfg.MaxTokensCap = 4096
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	s.metrics = newMetrics(cfg.Model, cfg.Engine)
	s.mux.HandleFunc("POST /v1/completions", s.handleCompletion)
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	s.mux.HandleFunc("GET /metrics", s.handleMetrics)
	s.mux.HandleFunc("GET /sim/stats", s.handleStats)
	s.mux.HandleFunc("GET /sim/faults", s.handleGetFaults)
	s.mux.HandleFunc("POST /sim/faults", s.handlePatchFaults)
	s.mux.HandleFunc("DELETE /sim/faults", s.handleResetFaults)
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	ecfg := s.cfg.Engine.Config()
	writeJSON(w, http.StatusOK, openai.ModelList{
		Object: "list",
		Data: []openai.Model{{
			ID:          s.cfg.Model,
			Object:      "model",
			Created:     time.Now().Unix(),
			OwnedBy:     "vllm",
			Root:        s.cfg.Model,
			MaxModelLen: ecfg.NumGPUBlocks * ecfg.BlockSize,
		}},
	})
}

// readBody reads a bounded request body.
func readBody(r *http.Request, w http.ResponseWriter) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		return nil, fmt.Errorf("%w: read body: %w", openai.ErrBadRequest, err)
	}
	return body, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with an OpenAI-style error body.
func writeError(w http.ResponseWriter, status int, param, msg string) {
	var p *string
	if param != "" {
		p = &param
	}
	writeJSON(w, status, openai.ErrorResponse{Error: openai.ErrorDetail{
		Message: msg,
		Type:    errorType(status),
		Param:   p,
		Code:    status,
	}})
}

func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusTooManyRequests:
		return "RateLimitError"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	}
	if status >= 500 {
		return "InternalServerError"
	}
	return "BadRequestError"
}

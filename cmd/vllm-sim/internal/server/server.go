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
	"slices"
	"sync"
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
	// Model is the served model name. Ignored when ServedModelNames is set.
	Model string
	// ServedModelNames are the names the base model answers to, the first
	// one echoed in responses and used as the metrics' model_name (vLLM's
	// --served-model-name).
	ServedModelNames []string
	// LoRAModules are the adapters registered at start (vLLM's
	// --lora-modules); they need an engine with MaxLoRAs > 0.
	LoRAModules []LoRAModule
	// Engine runs the sequences; its Run loop is owned by the caller.
	Engine *engine.Engine
	// Engines, when set, are data-parallel engines behind the one port, as
	// vLLM's --data-parallel-size serves them: each request goes to the
	// least loaded (waiting × 4 + running, the first of equals), and every
	// series of the metrics is labelled with its engine. Engine is then the
	// first of them. Their configurations must be the same.
	Engines []*engine.Engine
	// FirstRank is the data-parallel rank of the first engine, the others'
	// following it (vLLM's --data-parallel-start-rank): their metrics are
	// labelled engine="<rank>".
	FirstRank int
	// Faults is the fault state (default: no faults).
	Faults *faults.State
	// DefaultMaxTokens applies when a request sets no limit (default 16).
	DefaultMaxTokens int
	// MaxTokensCap clamps every request's limit (default 4096).
	MaxTokensCap int
	// PrefillTimeout bounds the call to the prefill pod a request names in
	// PrefillerHeader (default DefaultPrefillTimeout).
	PrefillTimeout time.Duration
}

// DefaultPrefillTimeout is the default Config.PrefillTimeout.
const DefaultPrefillTimeout = 60 * time.Second

// Server answers HTTP requests. Create it with New.
type Server struct {
	cfg      Config
	mux      *http.ServeMux
	metrics  *metrics
	ids      atomic.Uint64
	injected atomic.Int64
	started  int64 // Unix time, the created time of the base models

	// The prefill pods' client, and the requests whose prompt one
	// computed, or that were served here after their prefill pod failed.
	prefillClient    *http.Client
	prefilled        atomic.Int64
	prefillFallbacks atomic.Int64
	encoded          atomic.Int64 // multimodal items encoders encoded for this pod (encode.go)
	encodeFailures   atomic.Int64 // requests failed because an encoder did

	mu       sync.Mutex
	adapters []adapter // registered, in registration order

	rpc rpcState // the gRPC API's requests in flight (grpc.go)
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if len(cfg.ServedModelNames) == 0 && cfg.Model != "" {
		cfg.ServedModelNames = []string{cfg.Model}
	}
	if len(cfg.Engines) == 0 && cfg.Engine != nil {
		cfg.Engines = []*engine.Engine{cfg.Engine}
	}
	if len(cfg.Engines) == 0 || slices.Contains(cfg.Engines, nil) || len(cfg.ServedModelNames) == 0 || slices.Contains(cfg.ServedModelNames, "") {
		return nil, errors.New("server: engine and model are required")
	}
	if cfg.FirstRank < 0 {
		return nil, errors.New("server: the first engine's rank must not be negative")
	}
	cfg.Engine = cfg.Engines[0]
	cfg.Model = cfg.ServedModelNames[0]
	if len(cfg.LoRAModules) > 0 && cfg.Engine.Config().MaxLoRAs == 0 {
		return nil, errors.New("server: LoRA modules need max loras > 0")
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
	if cfg.PrefillTimeout <= 0 {
		cfg.PrefillTimeout = DefaultPrefillTimeout
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), started: time.Now().Unix(), prefillClient: &http.Client{}}
	for _, m := range cfg.LoRAModules {
		if err := s.register(m); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	srcs := make([]statsSource, len(cfg.Engines))
	for i, e := range cfg.Engines {
		srcs[i] = e
	}
	s.metrics = newMetrics(cfg.Model, cfg.FirstRank, srcs)
	if cfg.Engine.Config().MaxLoRAs > 0 {
		s.mux.HandleFunc("POST /v1/load_lora_adapter", s.handleLoadLoRA)
		s.mux.HandleFunc("POST /v1/unload_lora_adapter", s.handleUnloadLoRA)
	}
	s.mux.HandleFunc("POST /v1/completions", s.handleCompletion)
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("POST /tokenize", s.handleTokenize)
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

// errStoppedMidway is the message of a request the engine stopped before its
// last token (the simulator shutting down).
const errStoppedMidway = "the engine stopped before the request finished"

// stoppedMidway is the error event that ends a stream the engine stopped.
func stoppedMidway() openai.ErrorResponse {
	return openai.ErrorResponse{Error: openai.ErrorDetail{
		Message: errStoppedMidway,
		Type:    errorType(http.StatusServiceUnavailable),
		Code:    http.StatusServiceUnavailable,
	}}
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

// pickEngine returns the engine a new request goes to: the least loaded by
// vLLM's data-parallel balancer's score, waiting × 4 + running.
func (s *Server) pickEngine() int {
	if len(s.cfg.Engines) == 1 {
		return 0
	}
	best, bestScore := 0, 0
	for i, e := range s.cfg.Engines {
		running, waiting := e.Queues()
		if score := waiting*4 + running; i == 0 || score < bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// Package faults holds the simulator's injected failures: the settings (from
// flags, replaced or patched at run time through JSON) and the per-request
// dice roll that decides whether a request fails.
package faults

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
)

// Off disables a chunk-count fault.
const Off = -1

// Config is the set of faults in force. The zero value is not "no faults"
// (chunk counts of 0 act at once); start from None.
type Config struct {
	// ErrorRate is the fraction of completion requests answered with
	// ErrorStatus instead of being served, in [0, 1].
	ErrorRate float64 `json:"error_rate"`
	// ErrorStatus is the HTTP status of those answers (4xx or 5xx).
	ErrorStatus int `json:"error_status"`
	// StallAfterChunks: after this many server-sent events (0: right after
	// the headers) the stream stops, and the connection stays open until the
	// client leaves. Off (-1) disables it. A non-streamed request stalls
	// before its body whenever this is on.
	StallAfterChunks int `json:"stall_after_chunks"`
	// DropAfterChunks: after this many events the connection is closed
	// without ending the response. Off disables it. A non-streamed request
	// is dropped before its body whenever this is on.
	DropAfterChunks int `json:"drop_after_chunks"`
	// GRPCErrorAfterChunks: after this many chunks a streamed gRPC Generate
	// call ends with status INTERNAL in its trailers, as vLLM's servicer
	// ends a call whose generation failed (a call that is not streamed
	// sends no chunks: only 0 fails it). Off disables it. HTTP requests
	// ignore it.
	GRPCErrorAfterChunks int `json:"grpc_error_after_chunks"`
	// MetricsDelayMs delays every /metrics answer by this many milliseconds.
	MetricsDelayMs int `json:"metrics_delay_ms"`
	// MetricsGarbage makes /metrics answer 200 with text that is not the
	// Prometheus format.
	MetricsGarbage bool `json:"metrics_garbage"`
}

// None is the configuration without faults.
func None() Config {
	return Config{ErrorStatus: 500, StallAfterChunks: Off, DropAfterChunks: Off, GRPCErrorAfterChunks: Off}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if !(c.ErrorRate >= 0 && c.ErrorRate <= 1) {
		errs = append(errs, fmt.Errorf("error_rate must be in [0, 1], got %v", c.ErrorRate))
	}
	if c.ErrorStatus < 400 || c.ErrorStatus > 599 {
		errs = append(errs, fmt.Errorf("error_status must be a 4xx or 5xx code, got %d", c.ErrorStatus))
	}
	if c.StallAfterChunks < Off || c.DropAfterChunks < Off || c.GRPCErrorAfterChunks < Off {
		errs = append(errs, errors.New("chunk counts must be -1 (off) or more"))
	}
	if c.MetricsDelayMs < 0 {
		errs = append(errs, fmt.Errorf("metrics_delay_ms must not be negative, got %d", c.MetricsDelayMs))
	}
	return errors.Join(errs...)
}

// Patch returns c with the fields present in the JSON object data replaced.
func (c Config) Patch(data []byte) (Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("decode faults: %w", err)
	}
	if dec.More() {
		return Config{}, errors.New("decode faults: trailing data")
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("invalid faults: %w", err)
	}
	return c, nil
}

// State is the configuration in force, safe for concurrent use.
type State struct {
	mu  sync.Mutex
	cfg Config
	rng *rand.Rand
}

// NewState starts with cfg; seed makes the error dice reproducible.
func NewState(cfg Config, seed uint64) *State {
	return &State{cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x5eed))}
}

// Get returns the configuration in force.
func (s *State) Get() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Set replaces the configuration after validating it.
func (s *State) Set(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid faults: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = cfg
	return nil
}

// Patch applies a JSON patch (see Config.Patch) and returns the result.
func (s *State) Patch(data []byte) (Config, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg, err := s.cfg.Patch(data)
	if err != nil {
		return Config{}, err
	}
	s.cfg = cfg
	return cfg, nil
}

// Roll returns the configuration for one request and the status it must
// fail with, or 0 if it is to be served.
func (s *State) Roll() (Config, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.ErrorRate > 0 && s.rng.Float64() < s.cfg.ErrorRate {
		return s.cfg, s.cfg.ErrorStatus
	}
	return s.cfg, 0
}

// Package engine is the simulator's scheduler: a vLLM-like step loop over a
// FIFO waiting queue and a bounded set of running sequences that share one KV
// block pool (package kvcache).
//
// Each step the engine admits waiting sequences in arrival order while a
// running slot, token budget and KV blocks are available (the head of the
// queue blocks those behind it, as vLLM's FCFS policy does), gives every
// decoding sequence one token, and spends the rest of the step's token budget
// on prefill chunks. A step costs StepOverhead, plus DecodePerToken when any
// sequence decodes, plus PrefillPerToken for every prompt token computed in
// it. Prompt tokens found in the prefix cache are never computed; with an
// offloading tier, those the tier holds after the cached ones are loaded at
// OffloadLoadPerToken instead, and a sequence's computed blocks are copied
// to the tier once its prefill is done. A sequence whose prompt a prefill
// pod computed pulls every prompt block the pool does not hold at
// TransferPerBlock and computes only its last prompt token. Simulated time advances by the
// step's cost; a Pacer turns it into wall time.
package engine

import (
	"errors"
	"fmt"
	"time"
)

// Config is the simulated model server.
type Config struct {
	// BlockSize is the number of tokens per KV block.
	BlockSize int
	// NumGPUBlocks is the number of KV blocks in the pool.
	NumGPUBlocks int
	// MaxNumSeqs bounds the running sequences.
	MaxNumSeqs int
	// MaxBatchedTokens is the token budget of one step (decode tokens plus
	// prefill chunk tokens).
	MaxBatchedTokens int
	// PrefillPerToken is the cost of computing one prompt token.
	PrefillPerToken time.Duration
	// DecodePerToken is the cost of a step that decodes (one token for each
	// decoding sequence).
	DecodePerToken time.Duration
	// StepOverhead is the fixed cost of every step.
	StepOverhead time.Duration
	// MaxLoRAs is how many distinct LoRA adapters one batch may hold (vLLM's
	// --max-loras); 0 serves no adapters.
	MaxLoRAs int
	// MaxCPULoRAs is how many adapters stay loaded (vLLM's --max-cpu-loras),
	// least recently used evicted first; at least MaxLoRAs.
	MaxCPULoRAs int
	// LoRALoadCost is the simulated time a step spends loading an adapter
	// that is not loaded; the whole batch waits for it, as in vLLM.
	LoRALoadCost time.Duration
	// OffloadBlocks is the size, in blocks, of an offloading tier behind
	// the GPU pool (vLLM's OffloadingConnector with its CPU backend); 0
	// has none.
	OffloadBlocks int
	// OffloadLoadPerToken is the cost of loading one prompt token's KV
	// back from the offloading tier, spent in the step that admits the
	// sequence.
	OffloadLoadPerToken time.Duration
	// TransferPerBlock is the cost of pulling one KV block of a prompt a
	// prefill pod computed (Request.RemotePrefill), spent in the step that
	// admits the sequence.
	TransferPerBlock time.Duration
	// SlidingWindow, when not 0, makes the KV-cache events those of a
	// hybrid model whose second group of layers attends to the last
	// SlidingWindow tokens (group_idx 1, "sliding_window"; the first is
	// full attention): each block is stored in both groups, and once a
	// prompt is computed its blocks before the window leave the second.
	// Prefix hits follow the full-attention group alone.
	SlidingWindow int
}

// DefaultConfig is a small GPU serving a small model.
func DefaultConfig() Config {
	return Config{
		BlockSize:        16,
		NumGPUBlocks:     2048,
		MaxNumSeqs:       32,
		MaxBatchedTokens: 2048,
		PrefillPerToken:  100 * time.Microsecond,
		DecodePerToken:   20 * time.Millisecond,
		StepOverhead:     time.Millisecond,
	}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name  string
		value int
	}{
		{"block size", c.BlockSize},
		{"num gpu blocks", c.NumGPUBlocks},
		{"max num seqs", c.MaxNumSeqs},
		{"max batched tokens", c.MaxBatchedTokens},
	} {
		if f.value <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", f.name, f.value))
		}
	}
	if c.MaxLoRAs < 0 || c.MaxCPULoRAs < 0 {
		errs = append(errs, fmt.Errorf("max loras (%d) and max cpu loras (%d) must not be negative", c.MaxLoRAs, c.MaxCPULoRAs))
	} else if c.MaxCPULoRAs > 0 && c.MaxCPULoRAs < c.MaxLoRAs {
		errs = append(errs, fmt.Errorf("max cpu loras (%d) must be at least max loras (%d)", c.MaxCPULoRAs, c.MaxLoRAs))
	}
	if c.SlidingWindow < 0 {
		errs = append(errs, fmt.Errorf("sliding window must not be negative, got %d", c.SlidingWindow))
	}
	if c.OffloadBlocks < 0 {
		errs = append(errs, fmt.Errorf("offload blocks must not be negative, got %d", c.OffloadBlocks))
	}
	if c.PrefillPerToken < 0 || c.DecodePerToken < 0 || c.StepOverhead < 0 || c.LoRALoadCost < 0 || c.OffloadLoadPerToken < 0 || c.TransferPerBlock < 0 {
		errs = append(errs, errors.New("step costs must not be negative"))
	}
	return errors.Join(errs...)
}

package engine

import (
	"time"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/kvcache"
)

type phase int

const (
	queued phase = iota
	running
	finished
	aborted
)

// Request is one prompt to run.
type Request struct {
	// Prompt is the full prompt text; its tokens and blocks follow the
	// kvcache rule.
	Prompt string
	// MaxTokens is the exact number of tokens to generate (at least 1).
	MaxTokens int
	// LoRA names the adapter the sequence runs with; empty for the base
	// model. Adapters load on demand (Config.LoRALoadCost).
	LoRA string
	// CacheSalt, when set, keeps the sequence's blocks apart from those of
	// sequences with another salt or none, as vLLM keys a prompt's first
	// block (and through it the rest) by its cache_salt.
	CacheSalt string
	// RemotePrefill says a prefill pod computed the prompt and its KV is
	// pulled over the KV connector (vLLM's kv_transfer_params with
	// do_remote_prefill): the prompt tokens the pool does not hold are
	// transferred, not computed, and counted as external prefix-cache hits.
	RemotePrefill bool
	// Notify, if set, receives a value (without blocking; give it a buffer)
	// whenever the sequence makes progress. Several sequences may share it.
	Notify chan struct{}
}

// Status is a snapshot of a sequence. Times are simulated, counted from the
// sequence's arrival.
type Status struct {
	PromptTokens int
	// CachedTokens is the prefix cache hit, known once the sequence runs.
	CachedTokens int
	// Generated is the number of output tokens produced so far.
	Generated int
	// Done is set once the sequence finished or was aborted.
	Done bool
	// Aborted is set if the sequence ended before its last token.
	Aborted bool
	// QueueTime is the simulated time spent waiting (valid once running).
	QueueTime time.Duration
	// TTFT is the simulated time to the first token (valid once Generated > 0).
	TTFT time.Duration
}

// Sequence is a submitted request inside the engine.
type Sequence struct {
	e            *Engine
	notify       chan struct{}
	promptTokens int
	prompt       string // for the token ids of its KV-cache events
	hashes       []uint64
	anonymous    int // KV blocks needed beyond the hashed prompt blocks
	maxTokens    int
	lora         string
	salt         string
	remote       bool // Request.RemotePrefill

	// Guarded by e.mu.
	phase      phase
	lease      kvcache.Lease
	cached     int
	computed   int
	generated  int
	arrived    time.Duration
	admitted   time.Duration
	firstToken time.Duration
	stop       func() bool // unregisters the context hook
}

// Changed returns the channel that is signalled when the sequence makes
// progress (Request.Notify when that was set).
func (s *Sequence) Changed() <-chan struct{} { return s.notify }

// Status returns the sequence's current state.
func (s *Sequence) Status() Status {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	st := Status{
		PromptTokens: s.promptTokens,
		CachedTokens: s.cached,
		Generated:    s.generated,
		Done:         s.phase == finished || s.phase == aborted,
		Aborted:      s.phase == aborted,
	}
	if s.phase != queued {
		st.QueueTime = s.admitted - s.arrived
	}
	if s.generated > 0 {
		st.TTFT = s.firstToken - s.arrived
	}
	return st
}

// Abort ends the sequence now: it leaves the queue, or gives back its running
// slot and KV block references. Aborting a finished sequence does nothing.
// Cancelling the context given to Submit calls Abort.
func (s *Sequence) Abort() { s.e.abort(s) }

func (s *Sequence) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/kvcache"
	"github.com/inferpick/inferpick/picker/kvevents"
)

var (
	// ErrTooLarge reports that the prompt plus its output can never fit in the KV pool.
	ErrTooLarge = errors.New("request does not fit in the KV cache")
	// ErrInvalid reports that the request has no prompt or asks for no tokens.
	ErrInvalid = errors.New("invalid request")
	// ErrStopped reports that the engine is no longer running.
	ErrStopped = errors.New("engine stopped")
)

// Engine schedules sequences. Create it with New, run its loop with Run, and
// Submit requests from any goroutine.
type Engine struct {
	cfg   Config
	pacer Pacer
	wake  chan struct{}

	mu      sync.Mutex
	cache   *kvcache.Cache
	tier    *kvcache.Tier // nil without an offloading tier
	loading int           // prompt tokens the step being planned loads from tier
	pulling int           // KV blocks the step being planned pulls from prefill pods
	waiting []*Sequence
	running []*Sequence
	simNow  time.Duration
	totals  totals
	stopped bool
	lora    adapters

	// KV-cache events (WithEvents). publish and scheduled (WhenScheduled:
	// a step's events go out before its time passes) are set at New; the
	// rest is guarded by mu: the events of the step being planned, the
	// sequence being admitted, and the adapters' ids in events.
	publish   func([]kvevents.Event)
	scheduled bool
	events    []kvevents.Event
	admitting *Sequence
	loraIDs   map[string]int64
	windowed  map[uint64]bool // blocks the sliding-window group holds (Config.SlidingWindow)
}

// Option configures an Engine.
type Option func(*Engine)

// WithPacer sets how simulated time is spent (default: real time, scale 1).
func WithPacer(p Pacer) Option { return func(e *Engine) { e.pacer = p } }

// New returns an engine for cfg.
func New(cfg Config, opts ...Option) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("engine config: %w", err)
	}
	e := &Engine{
		cfg:   cfg,
		pacer: &WallPacer{Scale: 1},
		wake:  make(chan struct{}, 1),
		cache: kvcache.New(cfg.NumGPUBlocks),
	}
	if cfg.OffloadBlocks > 0 {
		e.tier = kvcache.NewTier(cfg.OffloadBlocks)
	}
	for _, o := range opts {
		o(e)
	}
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Submit queues a request. The sequence is aborted when ctx ends.
func (e *Engine) Submit(ctx context.Context, req Request) (*Sequence, error) {
	tokens := kvcache.NumTokens(req.Prompt)
	if tokens == 0 || req.MaxTokens < 1 {
		return nil, fmt.Errorf("%w: need a prompt and max tokens >= 1", ErrInvalid)
	}
	bs := e.cfg.BlockSize
	hashes := kvcache.BlockHashes(req.Prompt, bs)
	// An adapter's KV blocks are its own, and so are a salt's, as vLLM keys
	// them.
	if h := saltOf("lora:", req.LoRA) ^ saltOf("salt:", req.CacheSalt); h != 0 {
		for i := range hashes {
			hashes[i] ^= h
		}
	}
	blocks := (tokens + req.MaxTokens + bs - 1) / bs
	if blocks > e.cfg.NumGPUBlocks {
		return nil, fmt.Errorf("%w: %d prompt + %d output tokens need %d blocks of %d",
			ErrTooLarge, tokens, req.MaxTokens, blocks, e.cfg.NumGPUBlocks)
	}
	s := &Sequence{
		e:            e,
		notify:       req.Notify,
		promptTokens: tokens,
		prompt:       req.Prompt,
		hashes:       hashes,
		anonymous:    blocks - len(hashes),
		maxTokens:    req.MaxTokens,
		lora:         req.LoRA,
		salt:         req.CacheSalt,
		remote:       req.RemotePrefill,
	}
	if s.notify == nil {
		s.notify = make(chan struct{}, 1)
	}

	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil, ErrStopped
	}
	s.arrived = e.simNow
	e.waiting = append(e.waiting, s)
	e.totals.requests++
	s.stop = context.AfterFunc(ctx, s.Abort)
	e.mu.Unlock()

	e.signal()
	return s, nil
}

// Run is the step loop. It returns when ctx ends, after aborting every
// sequence still queued or running; Submit fails from then on.
func (e *Engine) Run(ctx context.Context) {
	defer e.shutdown()
	for {
		st, ok := e.plan()
		if !ok {
			// Blocks copied to the offloading tier at the last step's end
			// go out although no step follows.
			e.publishEvents(st.events)
			select {
			case <-e.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		// The step's cache changes happened at planning: they go out as
		// one batch, after the step's time or, WhenScheduled, before it,
		// even when the engine stops during the step.
		if e.scheduled {
			e.publishEvents(st.events)
		}
		err := e.pacer.Wait(ctx, st.cost)
		if !e.scheduled {
			e.publishEvents(st.events)
		}
		if err != nil {
			return
		}
		e.apply(st)
	}
}

// work is one sequence's part of a step: a prefill chunk, or (prefill == 0)
// one decode token.
type work struct {
	seq     *Sequence
	prefill int
}

type step struct {
	work   []work
	cost   time.Duration
	events []kvevents.Event // what admitting its sequences did to the cache
}

// plan admits waiting sequences and decides what the next step computes.
func (e *Engine) plan() (step, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()

	var st step
	budget := e.cfg.MaxBatchedTokens
	decoding := false
	for _, s := range e.running {
		if s.computed == s.promptTokens {
			st.work = append(st.work, work{seq: s})
			budget--
			decoding = true
		}
	}
	prefill := 0
	chunk := func(s *Sequence) {
		n := min(s.promptTokens-s.computed, budget)
		st.work = append(st.work, work{seq: s, prefill: n})
		budget -= n
		prefill += n
	}
	for _, s := range e.running {
		if s.computed < s.promptTokens && budget > 0 {
			chunk(s)
		}
	}
	e.lora.planBatch(e.running)
	loads := 0
	for i := 0; i < len(e.waiting) && len(e.running) < e.cfg.MaxNumSeqs && budget > 0; {
		s := e.waiting[i]
		if !e.lora.fits(s.lora, e.cfg.MaxLoRAs) {
			i++ // its adapter would pass max loras: it waits, the rest go on
			continue
		}
		if !e.admit(s) {
			break // first come, first served: the head blocks the rest
		}
		if s.lora != "" && e.lora.use(s.lora, e.cfg.loraCapacity()) {
			loads++
		}
		e.waiting = slices.Delete(e.waiting, i, i+1)
		chunk(s)
	}
	if len(st.work) == 0 {
		return step{events: e.takeEvents()}, false
	}
	st.cost = e.cfg.StepOverhead + time.Duration(prefill)*e.cfg.PrefillPerToken +
		time.Duration(loads)*e.cfg.LoRALoadCost + e.lora.debt +
		time.Duration(e.loading)*e.cfg.OffloadLoadPerToken +
		time.Duration(e.pulling)*e.cfg.TransferPerBlock
	e.lora.debt, e.loading, e.pulling = 0, 0, 0
	if decoding {
		st.cost += e.cfg.DecodePerToken
	}
	st.events = e.takeEvents()
	return st, true
}

// admit moves s to running if its KV blocks can be had. Called with e.mu held.
func (e *Engine) admit(s *Sequence) bool {
	// The last prompt token is always computed, so a fully cached prompt
	// still recomputes its last block (as vLLM does).
	most := (s.promptTokens - 1) / e.cfg.BlockSize
	hit := min(e.cache.Match(s.hashes), most)
	loaded := 0
	if e.tier != nil && !s.remote {
		loaded = min(e.tier.Match(s.hashes[hit:]), most-hit)
	}
	e.admitting = s
	lease, ok := e.cache.Acquire(s.hashes, s.anonymous)
	e.admitting = nil
	if !ok {
		return false
	}
	s.lease = lease
	s.phase = running
	bs := e.cfg.BlockSize
	s.cached = (hit + loaded) * bs
	s.admitted = e.simNow
	e.loading += loaded * bs
	e.running = append(e.running, s)
	e.totals.promptTokens += int64(s.promptTokens)
	e.totals.cachedTokens += int64(hit * bs)
	switch {
	case s.remote:
		e.pull(s, hit*bs)
	case e.tier != nil:
		e.totals.offloadQueries += int64(s.promptTokens - hit*bs)
		e.totals.offloadHits += int64(loaded * bs)
	}
	s.computed = s.cached
	return true
}

// pull admits the KV of a prompt a prefill pod computed: every prompt token
// after the local hit comes over the connector and is an external hit, as
// vLLM's NIXL connector counts it; only the last token is computed here, as
// vLLM recomputes it for its logits. Called with e.mu held.
func (e *Engine) pull(s *Sequence, local int) {
	remote := s.promptTokens - local
	e.pulling += (remote + e.cfg.BlockSize - 1) / e.cfg.BlockSize
	e.totals.transferred += int64(remote)
	s.cached = s.promptTokens - 1
}

// apply ends a step: simulated time moves on and each sequence that is still
// running gets its share of the step's work.
func (e *Engine) apply(st step) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.simNow += st.cost
	for _, w := range st.work {
		s := w.seq
		if s.phase != running {
			continue // aborted during the step
		}
		if w.prefill > 0 {
			s.computed += w.prefill
			if s.computed < s.promptTokens {
				continue
			}
			s.firstToken = e.simNow
			if e.tier != nil {
				e.tier.Store(s.hashes)
			}
			e.leftWindow(s)
			e.totals.firstTokens++
			e.totals.ttftSum += s.firstToken - s.arrived
		}
		s.generated++
		e.totals.generationTokens++
		if s.generated >= s.maxTokens {
			e.end(s, finished)
			e.totals.finished++
		}
		s.signal()
	}
}

func (e *Engine) abort(s *Sequence) {
	e.mu.Lock()
	if s.phase != queued && s.phase != running {
		e.mu.Unlock()
		return
	}
	e.end(s, aborted)
	e.totals.aborted++
	e.mu.Unlock()
	s.signal()
	e.signal()
}

// end takes s out of the queue or the running set. Called with e.mu held.
func (e *Engine) end(s *Sequence, to phase) {
	isS := func(x *Sequence) bool { return x == s }
	switch s.phase {
	case queued:
		e.waiting = slices.DeleteFunc(e.waiting, isS)
	case running:
		e.running = slices.DeleteFunc(e.running, isS)
		e.cache.Release(s.lease)
	}
	s.phase = to
	if s.stop != nil {
		s.stop()
	}
}

func (e *Engine) shutdown() {
	e.mu.Lock()
	e.stopped = true
	left := append(slices.Clone(e.waiting), e.running...)
	for _, s := range left {
		e.end(s, aborted)
		e.totals.aborted++
	}
	e.mu.Unlock()
	for _, s := range left {
		s.signal()
	}
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

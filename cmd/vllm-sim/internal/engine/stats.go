package engine

import (
	"slices"
	"time"
)

type totals struct {
	requests, finished, aborted                  int64
	promptTokens, cachedTokens, generationTokens int64
	offloadQueries, offloadHits                  int64
	transferred                                  int64
	firstTokens                                  int64
	ttftSum                                      time.Duration
}

// Stats is a snapshot of the engine's counters and state.
type Stats struct {
	// Requests submitted, finished (all tokens produced) and aborted.
	Requests, Finished, Aborted int64
	// PromptTokens of the sequences scheduled so far (the prefix cache
	// queries, in tokens), and how many of them were cache hits.
	PromptTokens, CachedTokens int64
	// OffloadQueries are the prompt tokens of those sequences the GPU pool
	// did not hold, looked up in the offloading tier, and OffloadHits how
	// many of them were loaded from it (vLLM's external prefix cache
	// counters); zero without a tier.
	OffloadQueries, OffloadHits int64
	// TransferredTokens are the prompt tokens of sequences a prefill pod
	// computed that the GPU pool did not hold, all pulled from the prefill
	// pod: vLLM counts them as external prefix cache queries and hits.
	TransferredTokens int64
	// OffloadedBlocks is the number of blocks in the offloading tier.
	OffloadedBlocks int
	// GenerationTokens produced.
	GenerationTokens int64
	// Running and Waiting sequences now.
	Running, Waiting int
	// KVCacheUsage is the fraction of KV blocks held by running sequences.
	KVCacheUsage float64
	// CachedBlocks is the number of hashed blocks in the pool.
	CachedBlocks int
	// SimulatedTime is the total simulated busy time.
	SimulatedTime time.Duration
	// FirstTokens counts sequences that produced a first token, and
	// SimulatedTTFTSum sums their simulated times to first token.
	FirstTokens      int64
	SimulatedTTFTSum time.Duration
	// LoRALoads counts adapter loads (preloading at start not counted).
	LoRALoads int64
	// RunningLoRAs and WaitingLoRAs are the sorted adapters of the running
	// and the waiting sequences; LoadedLoRAs those in memory, least
	// recently used first.
	RunningLoRAs, WaitingLoRAs, LoadedLoRAs []string
}

// Queues returns the sequences running and waiting now, without the rest
// of Stats.
func (e *Engine) Queues() (running, waiting int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.running), len(e.waiting)
}

// Stats returns the current counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.totals
	return Stats{
		Requests:          t.requests,
		Finished:          t.finished,
		Aborted:           t.aborted,
		PromptTokens:      t.promptTokens,
		CachedTokens:      t.cachedTokens,
		OffloadQueries:    t.offloadQueries,
		OffloadHits:       t.offloadHits,
		TransferredTokens: t.transferred,
		OffloadedBlocks:   e.offloaded(),
		GenerationTokens:  t.generationTokens,
		Running:           len(e.running),
		Waiting:           len(e.waiting),
		KVCacheUsage:      e.cache.Usage(),
		CachedBlocks:      e.cache.Cached(),
		SimulatedTime:     e.simNow,
		FirstTokens:       t.firstTokens,
		SimulatedTTFTSum:  t.ttftSum,
		LoRALoads:         e.lora.loads,
		RunningLoRAs:      distinctAdapters(e.running),
		WaitingLoRAs:      distinctAdapters(e.waiting),
		LoadedLoRAs:       slices.Clone(e.lora.loaded),
	}
}

// offloaded returns the blocks in the offloading tier. Called with e.mu
// held.
func (e *Engine) offloaded() int {
	if e.tier == nil {
		return 0
	}
	return e.tier.Len()
}

package server

import (
	"net/http"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/engine"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/faults"
)

// Stats is the GET /sim/stats body: totals since start.
type Stats struct {
	Model string `json:"model"`
	// Requests accepted by the engine, and how they ended.
	Requests int64 `json:"requests"`
	Finished int64 `json:"finished"`
	Aborted  int64 `json:"aborted"`
	// InjectedErrors counts requests failed by the error fault.
	InjectedErrors int64 `json:"injected_errors"`
	Running        int   `json:"running"`
	Waiting        int   `json:"waiting"`
	// PromptTokens of scheduled requests; CachedTokens of those were
	// prefix cache hits; HitRate = CachedTokens / PromptTokens.
	PromptTokens     int64   `json:"prompt_tokens"`
	CachedTokens     int64   `json:"cached_tokens"`
	HitRate          float64 `json:"hit_rate"`
	GenerationTokens int64   `json:"generation_tokens"`
	KVCacheUsage     float64 `json:"kv_cache_usage"`
	CachedBlocks     int     `json:"cached_blocks"`
	// OffloadedTokens of the prompt tokens were loaded back from the
	// offloading tier, which holds OffloadedBlocks now.
	OffloadedTokens int64 `json:"offloaded_tokens"`
	OffloadedBlocks int   `json:"offloaded_blocks"`
	// TransferredTokens of the prompt tokens were pulled from prefill pods
	// (requests that named one in x-prefiller-host-port).
	TransferredTokens int64 `json:"transferred_tokens"`
	// Prefilled counts the requests whose prompt the prefill pod they
	// named computed; PrefillFallbacks those served here after that pod
	// failed or could not be reached.
	Prefilled        int64 `json:"prefilled_remotely"`
	PrefillFallbacks int64 `json:"prefill_fallbacks"`
	// Encoded counts the multimodal items the encoders a request named
	// encoded; EncodeFailures the requests failed because one did not.
	Encoded        int64 `json:"encoded_items"`
	EncodeFailures int64 `json:"encode_failures"`
	// SimulatedSeconds is the engine's busy time in simulated seconds;
	// MeanSimulatedTTFTSeconds averages the simulated time to first token.
	SimulatedSeconds         float64 `json:"simulated_seconds"`
	MeanSimulatedTTFTSeconds float64 `json:"mean_simulated_ttft_seconds"`
	// LoRALoads counts adapter loads since start (those registered at
	// start not counted); LoadedLoRAs are the adapters in memory, least
	// recently used first.
	LoRALoads   int64    `json:"lora_loads"`
	LoadedLoRAs []string `json:"loaded_lora_adapters"`
}

func (s *Server) stats() Stats {
	es := s.engineStats()
	st := Stats{
		Model:             s.cfg.Model,
		Requests:          es.Requests,
		Finished:          es.Finished,
		Aborted:           es.Aborted,
		InjectedErrors:    s.injected.Load(),
		Running:           es.Running,
		Waiting:           es.Waiting,
		PromptTokens:      es.PromptTokens,
		CachedTokens:      es.CachedTokens,
		GenerationTokens:  es.GenerationTokens,
		KVCacheUsage:      es.KVCacheUsage,
		CachedBlocks:      es.CachedBlocks,
		OffloadedTokens:   es.OffloadHits,
		OffloadedBlocks:   es.OffloadedBlocks,
		TransferredTokens: es.TransferredTokens,
		Prefilled:         s.prefilled.Load(),
		PrefillFallbacks:  s.prefillFallbacks.Load(),
		Encoded:           s.encoded.Load(),
		EncodeFailures:    s.encodeFailures.Load(),
		SimulatedSeconds:  es.SimulatedTime.Seconds(),
		LoRALoads:         es.LoRALoads,
		LoadedLoRAs:       es.LoadedLoRAs,
	}
	if es.PromptTokens > 0 {
		st.HitRate = float64(es.CachedTokens) / float64(es.PromptTokens)
	}
	if es.FirstTokens > 0 {
		st.MeanSimulatedTTFTSeconds = es.SimulatedTTFTSum.Seconds() / float64(es.FirstTokens)
	}
	return st
}

// engineStats sums the engines' counters (KV-cache usage averaged; the
// adapters are the first engine's, every engine loading the same ones).
func (s *Server) engineStats() engine.Stats {
	es := s.cfg.Engines[0].Stats()
	for _, e := range s.cfg.Engines[1:] {
		o := e.Stats()
		es.Requests, es.Finished, es.Aborted = es.Requests+o.Requests, es.Finished+o.Finished, es.Aborted+o.Aborted
		es.PromptTokens, es.CachedTokens = es.PromptTokens+o.PromptTokens, es.CachedTokens+o.CachedTokens
		es.GenerationTokens += o.GenerationTokens
		es.Running, es.Waiting = es.Running+o.Running, es.Waiting+o.Waiting
		es.KVCacheUsage += o.KVCacheUsage
		es.CachedBlocks += o.CachedBlocks
		es.OffloadQueries, es.OffloadHits = es.OffloadQueries+o.OffloadQueries, es.OffloadHits+o.OffloadHits
		es.OffloadedBlocks += o.OffloadedBlocks
		es.TransferredTokens += o.TransferredTokens
		es.SimulatedTime = max(es.SimulatedTime, o.SimulatedTime)
		es.FirstTokens, es.SimulatedTTFTSum = es.FirstTokens+o.FirstTokens, es.SimulatedTTFTSum+o.SimulatedTTFTSum
		es.LoRALoads += o.LoRALoads
	}
	es.KVCacheUsage /= float64(len(s.cfg.Engines))
	return es
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.stats())
}

func (s *Server) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.cfg.Faults.Get())
}

// handlePatchFaults replaces the fields present in the JSON body and answers
// with the faults now in force.
func (s *Server) handlePatchFaults(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, w)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	cfg, err := s.cfg.Faults.Patch(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}

// handleResetFaults turns every fault off.
func (s *Server) handleResetFaults(w http.ResponseWriter, _ *http.Request) {
	cfg := faults.None()
	_ = s.cfg.Faults.Set(cfg)
	writeJSON(w, http.StatusOK, cfg)
}

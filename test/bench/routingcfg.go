package main

import (
	"fmt"
	"time"

	"github.com/inferpick/inferpick/test/bench/routing"
)

// simSpec is the routing benchmark's cluster: 8 pods whose KV pool holds
// about six of the shared-prefix workload's sixteen system prompts, so the
// working set fits the cluster but not one pod. Prefill is priced like a
// large model (300 µs a token) so that cache misses dominate TTFT.
func simSpec() routing.SimSpec {
	return routing.SimSpec{
		Pods:          8,
		FirstIP:       21,
		Port:          18000,
		TimeScale:     0.2,
		NumGPUBlocks:  800,
		BlockSize:     16,
		MaxNumSeqs:    32,
		PrefillUsTok:  300,
		DecodeMsTok:   20,
		MaxTokens:     8,
		ScrapeEvery:   50 * time.Millisecond,
		StartupWindow: 30 * time.Second,
		LoRAAdapters:  loraAdapters(),
		MaxLoRAs:      4,
		LoRALoadMs:    250,
	}
}

// loraAdapters are the multi-lora workload's adapters, registered on every
// pod: 32 of them for 4 slots a pod, so a router that ignores adapters
// keeps loading them.
func loraAdapters() []string {
	out := make([]string, 32)
	for i := range out {
		out[i] = fmt.Sprintf("adapter-%02d", i)
	}
	return out
}

// multiLoRARate is the multi-lora arrival rate, requests per simulated
// second, over a fixed window (quick or not) long enough for adapter
// loads to be more than the first load of each.
const (
	multiLoRARate   = 24.0
	multiLoRAWindow = 16.0
)

// sharedRates are the shared-prefix arrival rates, requests per simulated
// second.
var sharedRates = []float64{6, 12, 18, 24}

// The conversations of multi-turn and of the replicas' one-system-prompt:
// how many, their turns, and the bytes of their system prompts.
const turnSessions, sessionTurns, turnSystemBytes = 24, 6, 4000

// workloads returns the routing benchmark's workloads.
func workloads(quick bool) []*routing.Workload {
	window := 16.0 // simulated seconds of arrivals per open-loop run
	if quick {
		window = 6
	}
	var out []*routing.Workload
	for _, rate := range sharedRates {
		out = append(out, routing.SharedPrefix(routing.SharedPrefixSpec{
			Groups: 16, SystemBytes: 8000, QuestionByte: 200,
			Requests: max(int(rate*window), 60), Rate: rate, Seed: 1,
		}))
	}
	out = append(out,
		routing.MultiTurn(turnSessions, sessionTurns, turnSystemBytes, 300, 200, time.Second),
		routing.BurstOnPrefix(64, 8000, 200),
		routing.NoSharing(max(int(12*window), 60), 2000, 12, 3),
		routing.MultiLoRA(routing.MultiLoRASpec{
			Adapters: loraAdapters(), Zipf: 1.1, SystemBytes: 2000, QuestionBytes: 200,
			Requests: int(multiLoRARate * multiLoRAWindow), Rate: multiLoRARate, Seed: 4,
		}),
	)
	return out
}

// deadline is how long a run may take, in simulated time: the arrivals
// plus time to drain.
func deadline(w *routing.Workload) time.Duration {
	last := time.Duration(0)
	for _, r := range w.Requests {
		last = max(last, r.At)
	}
	return last + 40*time.Second
}

package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func loraConfig(maxLoRAs, maxCPU int) Config {
	cfg := testConfig()
	cfg.MaxLoRAs, cfg.MaxCPULoRAs, cfg.LoRALoadCost = maxLoRAs, maxCPU, 300*time.Millisecond
	return cfg
}

func submitLoRA(t *testing.T, e *Engine, lora, prompt string, maxTokens int) *Sequence {
	t.Helper()
	s, err := e.Submit(t.Context(), Request{Prompt: prompt, MaxTokens: maxTokens, LoRA: lora})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return s
}

// An adapter that is not loaded is loaded on demand: the step that admits
// its request pays the load cost (the request waits for it), a loaded one
// costs nothing, and the least recently used adapter is evicted when full.
func TestAdaptersLoadOnDemandAndEvictLeastRecentlyUsed(t *testing.T) {
	g := newGatedPacer()
	e := start(t, loraConfig(1, 2), g)
	e.Preload("a")

	run := func(lora string) time.Duration {
		t.Helper()
		s := submitLoRA(t, e, lora, "hello there", 1)
		cost := g.nextStep(t)
		g.finishStep()
		if st := waitDone(t, s); st.Generated != 1 {
			t.Fatalf("adapter %s: %+v", lora, st)
		}
		return cost
	}
	load := loraConfig(1, 2).LoRALoadCost
	for _, step := range []struct {
		lora     string
		wantLoad bool
		loaded   []string
	}{
		{"a", false, []string{"a"}},
		{"b", true, []string{"a", "b"}},
		{"a", false, []string{"b", "a"}},
		{"c", true, []string{"a", "c"}}, // b was the least recently used
		{"b", true, []string{"c", "b"}},
		{"", false, []string{"c", "b"}}, // the base model needs no adapter
	} {
		cost := run(step.lora)
		if got := cost >= load; got != step.wantLoad {
			t.Errorf("request for %q: step cost %v, want a load (%v) = %v", step.lora, cost, load, step.wantLoad)
		}
		if diff := cmp.Diff(step.loaded, e.Stats().LoadedLoRAs); diff != "" {
			t.Errorf("after %q, loaded adapters (-want +got):\n%s", step.lora, diff)
		}
	}
	if got := e.Stats().LoRALoads; got != 3 {
		t.Errorf("LoRALoads = %d, want 3 (preloading is free)", got)
	}
}

// A batch holds at most MaxLoRAs distinct adapters: a request for another
// adapter waits while requests behind it with a running adapter go on.
func TestBatchHoldsAtMostMaxLoRAs(t *testing.T) {
	g := newGatedPacer()
	e := start(t, loraConfig(1, 2), g)
	long := submitLoRA(t, e, "a", "first request", 50)
	g.nextStep(t)
	// Queued while the first step runs, so that the next plan sees them.
	blocked := submitLoRA(t, e, "b", "second request", 1)
	same := submitLoRA(t, e, "a", "third request", 1)
	g.finishStep()
	g.nextStep(t) // plans a's decode and the third request
	st := e.Stats()
	if diff := cmp.Diff([]string{"a"}, st.RunningLoRAs); diff != "" {
		t.Errorf("running adapters (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"b"}, st.WaitingLoRAs); diff != "" {
		t.Errorf("waiting adapters (-want +got):\n%s", diff)
	}
	if st.Running != 2 || st.Waiting != 1 {
		t.Errorf("running %d waiting %d, want the third request running and b's waiting", st.Running, st.Waiting)
	}
	g.finishStep()
	g.drive(t, same)
	long.Abort()
	g.drive(t, blocked)
	if st := blocked.Status(); st.Generated != 1 {
		t.Errorf("b's request after a's ended: %+v", st)
	}
}

// Runtime loading counts a load and charges the next step; unloading
// drops the adapter so its next request loads it again.
func TestLoadAndUnloadAdapter(t *testing.T) {
	g := newGatedPacer()
	e := start(t, loraConfig(2, 2), g)
	if !e.LoadAdapter("x") || e.LoadAdapter("x") {
		t.Fatalf("LoadAdapter: want true then false (already loaded)")
	}
	s := submitLoRA(t, e, "x", "hello", 1)
	if cost := g.nextStep(t); cost < loraConfig(2, 2).LoRALoadCost {
		t.Errorf("first step after a runtime load costs %v, want the load cost included", cost)
	}
	g.finishStep()
	waitDone(t, s)
	e.UnloadAdapter("x")
	if got := e.Stats().LoadedLoRAs; len(got) != 0 {
		t.Errorf("loaded after unload = %v, want none", got)
	}
	s = submitLoRA(t, e, "x", "hello", 1)
	g.nextStep(t)
	g.finishStep()
	waitDone(t, s)
	if got := e.Stats().LoRALoads; got != 2 {
		t.Errorf("LoRALoads = %d, want 2", got)
	}
}

// An adapter's KV blocks are its own: the same prompt with another adapter
// is not a cache hit.
func TestAdaptersDoNotShareCachedBlocks(t *testing.T) {
	e := start(t, loraConfig(2, 2), &WallPacer{})
	prompt := "a prompt long enough to fill a few blocks of four tokens each"
	waitDone(t, submitLoRA(t, e, "a", prompt, 1))
	if st := waitDone(t, submitLoRA(t, e, "b", prompt, 1)); st.CachedTokens != 0 {
		t.Errorf("adapter b reused %d tokens cached by adapter a", st.CachedTokens)
	}
	if st := waitDone(t, submitLoRA(t, e, "a", prompt, 1)); st.CachedTokens == 0 {
		t.Errorf("adapter a did not reuse its own cached prompt")
	}
}

package reliability

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

// TestAPromptOffloadedByItsPodIsSentBackThere: pods whose GPU pool holds one
// long prompt, with an offloading tier behind it (vllm-sim
// --kv-offloading-blocks, as vLLM's OffloadingConnector keeps one in CPU
// memory). A prompt sent through one picker is cached on the pod it chose;
// two other prompts sent straight to that pod push it out of the GPU pool
// into the tier (the pod publishes its GPU blocks removed and its CPU
// copies stored). Sent through a second picker, which never routed it and
// knows it only from the events, the prompt must go back to that pod and be
// loaded from the tier: every cached token of the answer is a loaded one. A
// picker that forgot a block when the GPU dropped it would guess among four
// pods; for four prompts it would be right every time about once in 256
// runs.
func TestAPromptOffloadedByItsPodIsSentBackThere(t *testing.T) {
	hosts := []string{"127.0.0.118", "127.0.0.119", "127.0.0.120", "127.0.0.121"}
	// 100 blocks of 16 tokens: one prompt of about 80 blocks.
	list, pickers, gws := pickersOverEventPods(t, hosts, "--num-gpu-blocks", "100", "--kv-offloading-blocks", "2000")
	sims := map[string]*sim{}
	for _, s := range list {
		sims[s.addr] = s
	}

	r := rand.New(rand.NewPCG(5, 3))
	for i := range 4 {
		prompt := randomPrompt(r, 400) // about 5 KB: 80 blocks of the simulator's 16 tokens
		before := requestsPerPod(t, sims)
		if n := cachedTokens(t, gws[0], prompt, ""); n != 0 {
			t.Fatalf("prompt %d: %d tokens cached on its first request, want none", i, n)
		}
		home := ""
		for addr, n := range requestsPerPod(t, sims) {
			if n > before[addr] {
				home = addr
			}
		}
		if home == "" {
			t.Fatalf("prompt %d: no pod counted the request", i)
		}
		known := kvBlocks(t, pickers[1])
		for range 2 {
			if code, body, err := sims[home].Complete(t.Context(), completion(randomPrompt(r, 400), 1, false)); err != nil || code != http.StatusOK {
				t.Fatalf("completion straight to %s: %d %v %.200s", home, code, err, body)
			}
		}
		// The second picker holds all three prompts' blocks: the tier
		// keeps what the GPU pool dropped. (Once it has the last one's,
		// it has every event before them.)
		eventually(t, 10*time.Second, func() error {
			if n := kvBlocks(t, pickers[1]); n < known+2*70 {
				return fmt.Errorf("the second picker knows %v blocks, want %v (the prompt's, still in the tier, and the two others')", n, known+2*70)
			}
			return nil
		})
		// /debug/workers shows the pod's blocks held only in its tier:
		// the prompt's and the first of the two that pushed it out.
		v, err := pickers[1].Worker(home)
		if err != nil {
			t.Fatal(err)
		}
		if n := v.KVEventOffloadedBlocks; n == nil || *n < 2*70 {
			t.Errorf("prompt %d: /debug/workers shows %v blocks of %s held only in its tier, want at least %d", i, n, home, 2*70)
		}
		loadedBefore := offloadedTokens(t, sims[home])
		cached := cachedTokens(t, gws[1], prompt, "")
		loaded := offloadedTokens(t, sims[home]) - loadedBefore
		if least := 70 * 16; cached < least || int64(cached) != loaded {
			t.Errorf("prompt %d through the other picker: %d tokens cached, %d of them loaded from %s's tier; want at least %d, all loaded",
				i, cached, loaded, home, least)
		}
	}
	// Every copy the tiers announced was of a block the pickers knew, and
	// the prompts pushed out are counted as held only offloaded.
	for _, p := range pickers {
		m, err := p.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		if n := m.Sum("inferpick_kv_events_dropped_blocks_total", "reason", "offloaded"); n != 0 {
			t.Errorf("a picker dropped %v offloaded copies of blocks it did not know", n)
		}
		if n := m.Sum("inferpick_kv_events_offloaded_blocks"); n < 2*70 {
			t.Errorf("inferpick_kv_events_offloaded_blocks = %v, want at least %d", n, 2*70)
		}
	}
}

// requestsPerPod reads each simulator's request count.
func requestsPerPod(t *testing.T, sims map[string]*sim) map[string]int64 {
	t.Helper()
	n := map[string]int64{}
	for addr, s := range sims {
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		n[addr] = st.Requests
	}
	return n
}

func offloadedTokens(t *testing.T, s *sim) int64 {
	t.Helper()
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st.OffloadedTokens
}

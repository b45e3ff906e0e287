package reliability

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestAHybridModelsWindowDoesNotHideItsPrompts: pods serving a hybrid model
// (vllm-sim --hybrid-sliding-window: full-attention layers and layers that
// attend to the last 128 tokens) publish every block in both KV-cache
// groups, and once a prompt is computed, its blocks before the window as
// removed from the sliding-window group. A prompt sent through one picker
// is cached on the pod it chose; sent through a second, which knows it only
// from the events, it must land on that pod. A picker that applied the
// window group's removals would have lost each prompt's first blocks, and
// with them the prompt; for four prompts over four pods it would be right
// every time about once in 256 runs.
func TestAHybridModelsWindowDoesNotHideItsPrompts(t *testing.T) {
	hosts := []string{"127.0.0.122", "127.0.0.123", "127.0.0.124", "127.0.0.125"}
	_, pickers, gws := pickersOverEventPods(t, hosts, "--hybrid-sliding-window", "128")
	r := rand.New(rand.NewPCG(13, 17))
	other := 0 // blocks of the window group's events so far
	for i := range 4 {
		prompt := randomPrompt(r, 400) // about 5 KB: 80 blocks of the simulator's 16 tokens
		// The simulator's tokens are 4 bytes each (a partial one counts),
		// its blocks 16 full tokens: the window group stores every block,
		// then removes those before the last 128 tokens.
		tokens, blocks := (len(prompt)+3)/4, len(prompt)/64
		other += blocks + min((tokens-128)/16, blocks)
		if n := cachedTokens(t, gws[0], prompt, ""); n != 0 {
			t.Fatalf("prompt %d: %d tokens cached on its first request, want none", i, n)
		}
		// The window group's removals come in the batch after the
		// prompt's blocks.
		eventually(t, 10*time.Second, func() error {
			m, err := pickers[1].Metrics()
			if err != nil {
				return err
			}
			if n := m.Sum("inferpick_kv_events_dropped_blocks_total", "reason", "group"); n != float64(other) {
				return fmt.Errorf("the second picker set aside %v blocks of the window group's events, want %d", n, other)
			}
			return nil
		})
		if again, least := cachedTokens(t, gws[1], prompt, ""), 70*16; again < least {
			t.Errorf("prompt %d through the other picker: %d tokens cached, want at least %d (the pod the first picker chose)", i, again, least)
		}
	}
}

package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRemotePrefillPullsThePromptAndCachesIt(t *testing.T) {
	cfg := testConfig()
	cfg.TransferPerBlock = 7 * time.Microsecond
	g := newGatedPacer()
	e := start(t, cfg, g)

	prefix := strings.Repeat("abcd", 8) // 8 tokens, 2 blocks
	warm := submit(t.Context(), t, e, prefix, 1)
	g.drive(t, warm)

	prompt := prefix + strings.Repeat("wxyz", 13) + "q" // 22 tokens: 5 full blocks and one token
	remote, err := e.Submit(t.Context(), Request{Prompt: prompt, MaxTokens: 2, RemotePrefill: true})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	// The 14 tokens after the 2 cached blocks come over in 4 blocks; only
	// the last prompt token is computed.
	if got, want := g.nextStep(t), cfg.StepOverhead+cfg.PrefillPerToken+4*cfg.TransferPerBlock; got != want {
		t.Errorf("admitting step costs %v, want %v (overhead, one prompt token, four blocks pulled)", got, want)
	}
	g.finishStep()
	g.drive(t, remote)
	if st := remote.Status(); st.CachedTokens != 21 || st.Generated != 2 {
		t.Errorf("remote sequence %+v, want 21 tokens not computed and 2 generated", st)
	}

	local := submit(t.Context(), t, e, prompt, 1)
	g.drive(t, local)
	st := e.Stats()
	got := map[string]int64{
		"local hit":   int64(local.Status().CachedTokens),
		"transferred": st.TransferredTokens,
		"gpu hits":    st.CachedTokens,
		"prompt":      st.PromptTokens,
	}
	// The repeated prompt finds its 5 full blocks that came over; the GPU
	// hits are the remote request's 8 and the local one's 20.
	want := map[string]int64{"local hit": 20, "transferred": 14, "gpu hits": 28, "prompt": 8 + 22 + 22}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

package engine

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/kvcache"
	"github.com/inferpick/inferpick/picker/kvevents"
)

// startWithEvents runs an engine that publishes its KV-cache events to the
// returned channel, one value per batch.
func startWithEvents(t *testing.T, cfg Config, p Pacer) (*Engine, <-chan []kvevents.Event) {
	t.Helper()
	ch := make(chan []kvevents.Event, 100)
	e := startWith(t, cfg, WithPacer(p), WithEvents(func(evs []kvevents.Event) {
		ch <- slices.Clone(evs)
	}))
	return e, ch
}

// nextBatch returns the next published batch.
func nextBatch(t *testing.T, ch <-chan []kvevents.Event) []kvevents.Event {
	t.Helper()
	select {
	case evs := <-ch:
		return evs
	case <-time.After(10 * time.Second):
		t.Fatal("no batch published")
		return nil
	}
}

// wantBatches checks that the next batches published are want, in order.
func wantBatches(t *testing.T, ch <-chan []kvevents.Event, want ...[]kvevents.Event) {
	t.Helper()
	for i, w := range want {
		if diff := cmp.Diff(w, nextBatch(t, ch)); diff != "" {
			t.Errorf("batch %d (-want +got):\n%s", i, diff)
		}
	}
}

// stored is the BlockStored of blocks [from, to) of prompt, as the engine
// with block size bs names them.
func stored(prompt string, bs, from, to int) kvevents.Event {
	hs := kvcache.BlockHashes(prompt, bs)
	blockBytes := bs * kvcache.BytesPerToken
	ev := kvevents.Event{
		Kind:      kvevents.BlockStored,
		Hashes:    hs[from:to],
		TokenIDs:  kvcache.TokenIDs(prompt[from*blockBytes:to*blockBytes], nil),
		BlockSize: bs,
		Medium:    "GPU",
	}
	if from > 0 {
		ev.Parent, ev.HasParent = hs[from-1], true
	}
	return ev
}

func removed(hs ...uint64) kvevents.Event {
	return kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: hs, Medium: "GPU"}
}

// The events of the sequences a step admits go out as one batch once the
// step's time has passed; a later admission stores only what is new,
// chained to the cached block before it.
func TestEventsOfAStepAreOneBatchAfterIt(t *testing.T) {
	g := newGatedPacer()
	e, ch := startWithEvents(t, testConfig(), g)
	first := strings.Repeat("f", 16)     // 1 block of 4 tokens
	shared := strings.Repeat("s", 32)    // 2 blocks
	a := shared + strings.Repeat("a", 8) // plus a partial block
	b := shared + strings.Repeat("b", 40)
	submit(t.Context(), t, e, first, 1)
	g.nextStep(t)
	// Queued while the first step runs, so that the next step admits both.
	submit(t.Context(), t, e, a, 1)
	submit(t.Context(), t, e, b, 1)
	for i, want := range [][]kvevents.Event{
		{stored(first, 4, 0, 1)},
		{stored(a, 4, 0, 2), stored(b, 4, 2, 4)},
	} {
		if i > 0 {
			g.nextStep(t)
		}
		select {
		case evs := <-ch:
			t.Fatalf("step %d: events %+v published before the step ended", i, evs)
		default:
		}
		g.finishStep()
		if diff := cmp.Diff(want, nextBatch(t, ch)); diff != "" {
			t.Errorf("step %d's batch (-want +got):\n%s", i, diff)
		}
	}
}

// WhenScheduled, a step's batch goes out while the step runs, before its
// time has passed.
func TestEventsWhenScheduledGoOutBeforeTheStepEnds(t *testing.T) {
	g := newGatedPacer()
	ch := make(chan []kvevents.Event, 100)
	e := startWith(t, testConfig(), WithPacer(g), WhenScheduled(), WithEvents(func(evs []kvevents.Event) {
		ch <- slices.Clone(evs)
	}))
	first := strings.Repeat("f", 16)
	submit(t.Context(), t, e, first, 1)
	g.nextStep(t)
	if diff := cmp.Diff([]kvevents.Event{stored(first, 4, 0, 1)}, nextBatch(t, ch)); diff != "" {
		t.Errorf("the running step's batch (-want +got):\n%s", diff)
	}
	g.finishStep()
}

// Blocks evicted to make room are removed in one event before the run they
// made room for, which stays one event.
func TestEvictionsComeBeforeTheRunTheyMakeRoomFor(t *testing.T) {
	cfg := testConfig()
	cfg.NumGPUBlocks = 4
	e, ch := startWithEvents(t, cfg, &WallPacer{})
	a, b := strings.Repeat("a", 48), strings.Repeat("b", 48) // 3 blocks, 1 more for the output
	waitDone(t, submit(t.Context(), t, e, a, 1))
	if diff := cmp.Diff([]kvevents.Event{stored(a, 4, 0, 3)}, nextBatch(t, ch)); diff != "" {
		t.Errorf("first prompt (-want +got):\n%s", diff)
	}
	waitDone(t, submit(t.Context(), t, e, b, 1))
	ha := kvcache.BlockHashes(a, 4)
	want := []kvevents.Event{removed(ha[2], ha[1], ha[0]), stored(b, 4, 0, 3)}
	if diff := cmp.Diff(want, nextBatch(t, ch)); diff != "" {
		t.Errorf("second prompt (-want +got):\n%s", diff)
	}
}

// A sequence with an adapter stores blocks named by the adapter and a small
// id that stays the adapter's.
func TestStoredEventsNameTheAdapter(t *testing.T) {
	e, ch := startWithEvents(t, loraConfig(2, 2), &WallPacer{})
	prompt := strings.Repeat("p", 16)
	for _, step := range []struct {
		lora   string
		prompt string
		wantID int64
	}{
		{lora: "x", prompt: prompt, wantID: 1},
		{lora: "y", prompt: prompt, wantID: 2},
		{lora: "x", prompt: prompt + strings.Repeat("q", 16), wantID: 1},
		{lora: "", prompt: prompt},
	} {
		waitDone(t, submitLoRA(t, e, step.lora, step.prompt, 1))
		evs := nextBatch(t, ch)
		if len(evs) != 1 {
			t.Fatalf("adapter %q: events %+v, want one BlockStored", step.lora, evs)
		}
		got := evs[0]
		want := kvevents.Event{LoraName: step.lora, LoraID: step.wantID, HasLora: step.lora != ""}
		opts := cmpopts.IgnoreFields(kvevents.Event{}, "Kind", "Hashes", "Parent", "HasParent", "TokenIDs", "BlockSize", "Medium")
		if diff := cmp.Diff(want, got, opts); diff != "" {
			t.Errorf("adapter %q (-want +got):\n%s", step.lora, diff)
		}
	}
}

// A cache salt keeps a prompt's blocks apart from the same prompt without
// it or under another, and its first stored run carries the salt as the
// first block's extra keys (after the adapter's name, on the wire), as vLLM
// publishes them; the runs after it chain from there and carry none.
func TestSaltedPromptsAreCachedApartAndSaySo(t *testing.T) {
	e, ch := startWithEvents(t, loraConfig(2, 2), &WallPacer{})
	prompt := strings.Repeat("p", 32) // 2 blocks of 4 tokens
	submitSalted := func(lora, salt, prompt string) Status {
		t.Helper()
		s, err := e.Submit(t.Context(), Request{Prompt: prompt, MaxTokens: 1, LoRA: lora, CacheSalt: salt})
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
		return waitDone(t, s)
	}
	for _, step := range []struct {
		lora, salt, prompt string
		wantCached         int
		wantExtra          []kvevents.ExtraKeys
	}{
		{"", "tenant-a", prompt, 0, []kvevents.ExtraKeys{kvevents.SaltKeys("tenant-a")}},
		{"", "", prompt, 0, nil},
		{"", "tenant-b", prompt, 0, []kvevents.ExtraKeys{kvevents.SaltKeys("tenant-b")}},
		{"x", "tenant-a", prompt, 0, []kvevents.ExtraKeys{kvevents.SaltKeys("tenant-a")}},
		{"", "tenant-a", prompt + strings.Repeat("q", 16), 8, nil}, // extends the first: only the new block is stored
	} {
		if st := submitSalted(step.lora, step.salt, step.prompt); st.CachedTokens != step.wantCached {
			t.Errorf("adapter %q salt %q: %d tokens cached, want %d", step.lora, step.salt, st.CachedTokens, step.wantCached)
		}
		evs := nextBatch(t, ch)
		if len(evs) != 1 || evs[0].Kind != kvevents.BlockStored {
			t.Fatalf("adapter %q salt %q: events %+v, want one BlockStored", step.lora, step.salt, evs)
		}
		if diff := cmp.Diff(step.wantExtra, evs[0].Extra, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("adapter %q salt %q: extra keys (-want +got):\n%s", step.lora, step.salt, diff)
		}
	}
}

// offloaded and dropped are the offloading tier's events of the blocks
// [from, to) of prompt, and of the hashes it evicts.
func offloaded(prompt string, bs, from, to int) kvevents.Event {
	return kvevents.Event{Kind: kvevents.BlockStored, Hashes: kvcache.BlockHashes(prompt, bs)[from:to], BlockSize: bs, Medium: "CPU"}
}

func dropped(hs ...uint64) kvevents.Event {
	return kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: hs, Medium: "CPU"}
}

// With an offloading tier, a prompt's blocks are copied to it once they are
// computed (in the batch after the GPU's), a prompt the GPU pool evicted
// is loaded back from the tier instead of computed, and the tier evicts the
// blocks least recently used, each event naming its medium.
func TestAnOffloadedPromptIsLoadedBackInsteadOfComputed(t *testing.T) {
	cfg := testConfig()
	cfg.NumGPUBlocks = 4 // one prompt of 3 blocks and its output
	cfg.OffloadBlocks = 6
	cfg.OffloadLoadPerToken = 10 * time.Microsecond
	e, ch := startWithEvents(t, cfg, &WallPacer{})
	a, b, c := strings.Repeat("a", 48), strings.Repeat("b", 48), strings.Repeat("c", 48)
	ha, hb := kvcache.BlockHashes(a, 4), kvcache.BlockHashes(b, 4)

	// Each request's batches are read before the next is sent: the tier's
	// copies go out with whatever step follows, so a request sent earlier
	// would share their batch.
	cold := waitDone(t, submit(t.Context(), t, e, a, 1))
	wantBatches(t, ch, []kvevents.Event{stored(a, 4, 0, 3)}, []kvevents.Event{offloaded(a, 4, 0, 3)})
	waitDone(t, submit(t.Context(), t, e, b, 1))
	wantBatches(t, ch, []kvevents.Event{removed(ha[2], ha[1], ha[0]), stored(b, 4, 0, 3)},
		[]kvevents.Event{offloaded(b, 4, 0, 3)})
	// a comes back to the GPU; the tier has it already.
	again := waitDone(t, submit(t.Context(), t, e, a, 1))
	wantBatches(t, ch, []kvevents.Event{removed(hb[2], hb[1], hb[0]), stored(a, 4, 0, 3)})
	// c: a was used after b, so b leaves the tier.
	waitDone(t, submit(t.Context(), t, e, c, 1))
	wantBatches(t, ch, []kvevents.Event{removed(ha[2], ha[1], ha[0]), stored(c, 4, 0, 3)},
		[]kvevents.Event{dropped(hb[0], hb[1], hb[2]), offloaded(c, 4, 0, 3)})

	// 12 tokens: the first two blocks loaded, the last recomputed.
	if again.CachedTokens != 8 {
		t.Errorf("cached tokens of the offloaded prompt = %d, want 8", again.CachedTokens)
	}
	wantTTFT := cfg.StepOverhead + 4*cfg.PrefillPerToken + 8*cfg.OffloadLoadPerToken
	if again.TTFT != wantTTFT || cold.TTFT != cfg.StepOverhead+12*cfg.PrefillPerToken {
		t.Errorf("simulated TTFT cold %v, loaded back %v; want %v and %v", cold.TTFT, again.TTFT,
			cfg.StepOverhead+12*cfg.PrefillPerToken, wantTTFT)
	}
	st := e.Stats()
	got := []int64{st.CachedTokens, st.OffloadQueries, st.OffloadHits, int64(st.OffloadedBlocks)}
	// The GPU pool never held a prompt on its return; the tier was asked
	// for all 48 prompt tokens and gave 8.
	if diff := cmp.Diff([]int64{0, 48, 8, 6}, got); diff != "" {
		t.Errorf("GPU hits, tier queries, tier hits, tier blocks (-want +got):\n%s", diff)
	}
}

// inGroup is ev as a hybrid model's group g publishes it, of kind unless
// "" (removals name no kind).
func inGroup(ev kvevents.Event, g int64, kind string) kvevents.Event {
	ev.Group, ev.HasGroup, ev.SpecKind = g, true, kind
	return ev
}

// A hybrid model stores each block in its full-attention group and its
// sliding-window group; once a prompt is computed the blocks before its
// window leave the second group (in the next batch), and an eviction
// removes the block from each group that still holds it.
func TestAHybridModelPublishesEachGroupsBlocks(t *testing.T) {
	cfg := testConfig()
	cfg.NumGPUBlocks = 4
	cfg.SlidingWindow = 4 // one block of 4 tokens
	e, ch := startWithEvents(t, cfg, &WallPacer{})
	a, b := strings.Repeat("a", 48), strings.Repeat("b", 48) // 3 blocks, 1 more for the output
	ha := kvcache.BlockHashes(a, 4)
	waitDone(t, submit(t.Context(), t, e, a, 1))
	wantBatches(t, ch,
		[]kvevents.Event{inGroup(stored(a, 4, 0, 3), 0, "full_attention"), inGroup(stored(a, 4, 0, 3), 1, "sliding_window")},
		// 12 tokens, a window of 4: its first two blocks leave group 1.
		[]kvevents.Event{inGroup(removed(ha[0], ha[1]), 1, "")})
	// b evicts a's blocks, tail first: from group 0 all three, from group 1
	// the one it kept.
	waitDone(t, submit(t.Context(), t, e, b, 1))
	wantBatches(t, ch, []kvevents.Event{inGroup(removed(ha[2]), 0, ""), inGroup(removed(ha[2]), 1, ""),
		inGroup(removed(ha[1], ha[0]), 0, ""),
		inGroup(stored(b, 4, 0, 3), 0, "full_attention"), inGroup(stored(b, 4, 0, 3), 1, "sliding_window")})
}

package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// gatedPacer hands every planned step to the test and waits for permission
// to finish it, so tests see the engine between steps.
type gatedPacer struct {
	planned chan time.Duration
	release chan struct{}
}

func newGatedPacer() *gatedPacer {
	return &gatedPacer{planned: make(chan time.Duration), release: make(chan struct{})}
}

func (g *gatedPacer) Wait(ctx context.Context, d time.Duration) error {
	select {
	case g.planned <- d:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// nextStep waits until the engine has planned a step and returns its cost.
func (g *gatedPacer) nextStep(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-g.planned:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no step planned")
		return 0
	}
}

func (g *gatedPacer) finishStep() { g.release <- struct{}{} }

// drive lets the engine run its steps until s is done. No planned step may
// be held by the test when it is called.
func (g *gatedPacer) drive(t *testing.T, s *Sequence) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-g.planned:
			g.finishStep()
		case <-s.Changed():
			if s.Status().Done {
				return
			}
		case <-deadline:
			t.Fatalf("sequence not done: %+v", s.Status())
		}
	}
}

func testConfig() Config {
	return Config{
		BlockSize:        4,
		NumGPUBlocks:     64,
		MaxNumSeqs:       4,
		MaxBatchedTokens: 256,
		PrefillPerToken:  100 * time.Microsecond,
		DecodePerToken:   20 * time.Millisecond,
		StepOverhead:     time.Millisecond,
	}
}

// start runs an engine until the test ends.
func start(t *testing.T, cfg Config, p Pacer) *Engine {
	t.Helper()
	return startWith(t, cfg, WithPacer(p))
}

// startWith runs an engine with options until the test ends.
func startWith(t *testing.T, cfg Config, opts ...Option) *Engine {
	t.Helper()
	e, err := New(cfg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return e
}

// waitDone blocks until seq is done and returns its final status.
func waitDone(t *testing.T, s *Sequence) Status {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if st := s.Status(); st.Done {
			return st
		}
		select {
		case <-s.Changed():
		case <-deadline:
			t.Fatalf("sequence not done: %+v", s.Status())
		}
	}
}

func submit(ctx context.Context, t *testing.T, e *Engine, prompt string, maxTokens int) *Sequence {
	t.Helper()
	s, err := e.Submit(ctx, Request{Prompt: prompt, MaxTokens: maxTokens})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return s
}

type counts struct {
	Running, Waiting  int
	Finished, Aborted int64
}

func countsOf(st Stats) counts {
	return counts{Running: st.Running, Waiting: st.Waiting, Finished: st.Finished, Aborted: st.Aborted}
}

func TestSharedPrefixIsCachedAndPrefillsFaster(t *testing.T) {
	e := start(t, testConfig(), &WallPacer{})
	prefix := strings.Repeat("system prompt. ", 40) // 600 bytes, 150 tokens

	first := waitDone(t, submit(t.Context(), t, e, prefix+"question one", 4))
	second := waitDone(t, submit(t.Context(), t, e, prefix+"question two", 4))
	other := waitDone(t, submit(t.Context(), t, e, strings.Repeat("unrelated text ", 40)+"q", 4))

	got := map[string]int{"first": first.CachedTokens, "second": second.CachedTokens, "other": other.CachedTokens}
	want := map[string]int{"first": 0, "second": 152, "other": 0} // 608 shared bytes: 38 full blocks of 4 tokens
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cached tokens (-want +got):\n%s", diff)
	}
	if second.TTFT >= first.TTFT {
		t.Errorf("simulated TTFT with a warm prefix = %v, want below cold %v", second.TTFT, first.TTFT)
	}
	st := e.Stats()
	if st.CachedTokens != 152 || st.PromptTokens != int64(first.PromptTokens+second.PromptTokens+other.PromptTokens) {
		t.Errorf("stats cached=%d prompt=%d, want 152 and the sum of prompts", st.CachedTokens, st.PromptTokens)
	}
}

func TestFullyCachedPromptRecomputesLastBlock(t *testing.T) {
	e := start(t, testConfig(), &WallPacer{})
	prompt := strings.Repeat("abcd", 32) // 32 tokens, 8 full blocks
	waitDone(t, submit(t.Context(), t, e, prompt, 1))
	again := waitDone(t, submit(t.Context(), t, e, prompt, 1))
	if again.CachedTokens != 28 {
		t.Errorf("cached tokens of a repeated prompt = %d, want 28", again.CachedTokens)
	}
}

func TestMaxNumSeqsQueuesAndAbortFreesTheSlot(t *testing.T) {
	cfg := testConfig()
	cfg.MaxNumSeqs = 1
	g := newGatedPacer()
	e := start(t, cfg, g)

	ctxA, cancelA := context.WithCancel(t.Context())
	a := submit(ctxA, t, e, "first request prompt", 100)
	b := submit(t.Context(), t, e, "second request prompt", 2)

	g.nextStep(t)
	if diff := cmp.Diff(counts{Running: 1, Waiting: 1}, countsOf(e.Stats())); diff != "" {
		t.Errorf("while the first runs (-want +got):\n%s", diff)
	}
	g.finishStep()
	g.nextStep(t) // a decodes; b still waits

	cancelA()
	if st := waitDone(t, a); !st.Aborted {
		t.Errorf("cancelled sequence status %+v, want aborted", st)
	}
	if diff := cmp.Diff(counts{Running: 0, Waiting: 1, Aborted: 1}, countsOf(e.Stats())); diff != "" {
		t.Errorf("after cancelling the first (-want +got):\n%s", diff)
	}
	g.finishStep()
	g.nextStep(t)
	if diff := cmp.Diff(counts{Running: 1, Waiting: 0, Aborted: 1}, countsOf(e.Stats())); diff != "" {
		t.Errorf("the waiting request should start (-want +got):\n%s", diff)
	}
	g.finishStep()
	g.drive(t, b)
	if st := b.Status(); st.Aborted || st.Generated != 2 {
		t.Errorf("second request status %+v, want 2 tokens, not aborted", st)
	}
}

func TestCancelledWaitingRequestLeavesTheQueue(t *testing.T) {
	cfg := testConfig()
	cfg.MaxNumSeqs = 1
	g := newGatedPacer()
	e := start(t, cfg, g)
	submit(t.Context(), t, e, "runs first", 5)
	ctx, cancel := context.WithCancel(t.Context())
	queued := submit(ctx, t, e, "waits", 5)
	g.nextStep(t)
	cancel()
	waitDone(t, queued)
	if diff := cmp.Diff(counts{Running: 1, Waiting: 0, Aborted: 1}, countsOf(e.Stats())); diff != "" {
		t.Errorf("after cancelling the waiting request (-want +got):\n%s", diff)
	}
}

func TestKVPressureQueuesUntilBlocksAreFree(t *testing.T) {
	cfg := testConfig()
	cfg.NumGPUBlocks = 10 // 40 tokens
	g := newGatedPacer()
	e := start(t, cfg, g)
	big := submit(t.Context(), t, e, strings.Repeat("x", 100), 5)  // 25+5 tokens: 8 blocks
	small := submit(t.Context(), t, e, strings.Repeat("y", 40), 4) // 10+4 tokens: 4 blocks
	g.nextStep(t)
	if diff := cmp.Diff(counts{Running: 1, Waiting: 1}, countsOf(e.Stats())); diff != "" {
		t.Errorf("with the pool nearly full (-want +got):\n%s", diff)
	}
	g.finishStep()
	g.drive(t, big)
	g.drive(t, small)
	if st := small.Status(); st.QueueTime == 0 {
		t.Errorf("small request status %+v, want it to have waited", st)
	}
	if _, err := e.Submit(t.Context(), Request{Prompt: strings.Repeat("z", 200), MaxTokens: 1}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Submit of a prompt larger than the pool: err = %v, want ErrTooLarge", err)
	}
}

func TestEvictionUnderCapacityPressure(t *testing.T) {
	cfg := testConfig()
	cfg.NumGPUBlocks = 12
	e := start(t, cfg, &WallPacer{})
	prompt := func(c string) string { return strings.Repeat(c, 33) } // 9 tokens: 2 full blocks
	waitDone(t, submit(t.Context(), t, e, prompt("a"), 1))
	if st := waitDone(t, submit(t.Context(), t, e, prompt("a"), 1)); st.CachedTokens != 8 {
		t.Fatalf("repeat before pressure cached %d tokens, want 8", st.CachedTokens)
	}
	for _, c := range []string{"b", "c", "d", "e", "f", "g"} {
		waitDone(t, submit(t.Context(), t, e, prompt(c), 1))
	}
	if st := waitDone(t, submit(t.Context(), t, e, prompt("a"), 1)); st.CachedTokens != 0 {
		t.Errorf("repeat after 6 other prompts cached %d tokens, want 0 (evicted)", st.CachedTokens)
	}
	if got := e.Stats().KVCacheUsage; got != 0 {
		t.Errorf("KV usage when idle = %v, want 0", got)
	}
}

func TestPrefillSharesTheStepBudget(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBatchedTokens = 32
	g := newGatedPacer()
	e := start(t, cfg, g)
	a := submit(t.Context(), t, e, strings.Repeat("a", 128), 1) // 32 tokens
	b := submit(t.Context(), t, e, strings.Repeat("b", 128), 1)
	g.drive(t, b)
	if ta, tb := waitDone(t, a).TTFT, b.Status().TTFT; tb <= ta {
		t.Errorf("second prefill TTFT %v, want above the first's %v (one budget per step)", tb, ta)
	}
}

func TestStopAbortsEverything(t *testing.T) {
	cfg := testConfig()
	g := newGatedPacer()
	e, err := New(cfg, WithPacer(g))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	s := submit(t.Context(), t, e, "prompt", 10)
	g.nextStep(t)
	cancel()
	<-done
	if st := s.Status(); !st.Aborted {
		t.Errorf("status after stop %+v, want aborted", st)
	}
	if _, err := e.Submit(t.Context(), Request{Prompt: "late", MaxTokens: 1}); !errors.Is(err, ErrStopped) {
		t.Errorf("Submit after stop: err = %v, want ErrStopped", err)
	}
}

package policy

import (
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// serverSide feeds a worker the metrics a model server would report as it
// serves: cumulative counters advanced by each scrape.
type serverSide struct {
	w   *registry.Worker
	m   registry.Metrics
	clk *clock
}

func newServerSide(w *registry.Worker, clk *clock, blocks int) *serverSide {
	s := &serverSide{w: w, clk: clk, m: registry.Metrics{BlockSize: 16, NumGPUBlocks: blocks}}
	s.scrape()
	return s
}

// serve advances the counters by requests that queried prompt tokens, hit
// hits of them, prefilled the rest at prefill a token and decoded out
// tokens at decode a token.
func (s *serverSide) serve(requests int, prompt, hits float64, prefill, decode time.Duration, out float64) {
	s.serveTier(requests, prompt, hits, 0, prefill, decode, out)
}

// serveTier is serve on a server with an offloading tier, which loaded
// back loaded more of the prompt tokens after the hits.
func (s *serverSide) serveTier(requests int, prompt, hits, loaded float64, prefill, decode time.Duration, out float64) {
	c := &s.m.Counters
	c.PromptTokens += prompt
	c.PrefixQueries += prompt
	c.PrefixHits += hits
	c.TierHits += loaded
	c.Prefills += float64(requests)
	c.PrefillSeconds += (prompt - hits - loaded) * prefill.Seconds()
	c.DecodeTokens += out
	c.DecodeSeconds += out * decode.Seconds()
}

func (s *serverSide) scrape() {
	s.clk.t = s.clk.t.Add(100 * time.Millisecond)
	m := s.m
	m.Scraped = s.clk.t
	s.w.SetMetrics(&m)
}

// calibrating builds a policy over one worker whose server reports 272 KV
// blocks of 16 tokens, and the request the tests send: an 8,000-byte
// system prompt and a 200-byte question.
func calibrating(t *testing.T) (Policy, []*registry.Worker, *serverSide, *Request) {
	reg, ws := pool(1)
	clk := &clock{t: epoch}
	return build(t, Config{}, reg, clk), ws, newServerSide(ws[0], clk, 272), chat("sys", "q", 8000, 200)
}

func TestCalibrationLearnsServerCostsAndShowsSources(t *testing.T) {
	p, ws, srv, req := calibrating(t)

	pickOne(t, p, ws, req)
	c := ws[0].Calibration()
	if c == nil || c.PrefillPerToken != 0 || c.CapacityBlocks != 272*16*4/prefix.BlockSize {
		t.Fatalf("before any traffic: calibration %+v, want no prefill figure and capacity from cache_config_info at 4 bytes a token", c)
	}
	for range 20 {
		pickOne(t, p, ws, req) // 8,200 bytes routed a pick
		srv.serve(1, 2050, 0, time.Millisecond, 25*time.Millisecond, 8)
		srv.scrape()
	}
	pickOne(t, p, ws, req)
	c = ws[0].Calibration()
	if got := c.PrefillPerToken; got < 990*time.Microsecond || got > 1010*time.Microsecond {
		t.Errorf("prefill per token = %v, want 1ms (%s)", got, c.PrefillSource)
	}
	if got := c.DecodePerToken; got < 24*time.Millisecond || got > 26*time.Millisecond {
		t.Errorf("decode per token = %v, want 25ms (%s)", got, c.DecodeSource)
	}
	if c.BytesPerToken < 3.5 || c.BytesPerToken > 4.5 {
		t.Errorf("bytes per token = %.2f, want about 8,200/2,050 = 4", c.BytesPerToken)
	}
	if got := c.MeanPrefill; got < 2000*time.Millisecond || got > 2100*time.Millisecond {
		t.Errorf("mean prefill = %v, want 2.05s", got)
	}
	// Every request prefills its whole prompt: a request ahead costs as
	// much as a miss, so the configured rate (the least sticky allowed)
	// stands.
	if c.BlocksPerLoadScale != 1 {
		t.Errorf("blocksPerLoad scale = %.3f, want 1", c.BlocksPerLoadScale)
	}
	for _, s := range []string{c.PrefillSource, c.DecodeSource, c.CapacitySource, c.MaxSeqsSource} {
		if s == "" {
			t.Errorf("calibration %+v leaves a source empty", c)
		}
	}
}

// On a server whose prefix hits keep falling short of what the index
// predicted (it evicts sooner than its reported capacity suggests), the
// index is granted less capacity; it never grants more than the server's
// KV tokens, and it grows back once the hits match again.
func TestCapacityShrinksWhenPredictedHitsFail(t *testing.T) {
	p, ws, srv, req := calibrating(t)
	full := 272 * 16 * 4 / prefix.BlockSize

	pickOne(t, p, ws, req) // cold: the index learns the prompt
	for range 40 {
		pickOne(t, p, ws, req) // the index predicts 125 blocks cached
		srv.serve(1, 2050, 0, time.Millisecond, 20*time.Millisecond, 8)
		srv.scrape()
	}
	pickOne(t, p, ws, req)
	c := ws[0].Calibration()
	if c.CapacityBlocks >= full || c.CapacityScale >= 1 {
		t.Fatalf("no hits where the index predicted 125 blocks: capacity %d blocks (scale %.2f), want below %d (%s)",
			c.CapacityBlocks, c.CapacityScale, full, c.CapacitySource)
	}
	shrunk := c.CapacityBlocks
	for range 200 {
		pickOne(t, p, ws, req)
		srv.serve(1, 2050, 2000, time.Millisecond, 20*time.Millisecond, 8)
		srv.scrape()
	}
	pickOne(t, p, ws, req)
	c = ws[0].Calibration()
	if c.CapacityBlocks <= shrunk || c.CapacityBlocks > full {
		t.Errorf("hits back at the prediction: capacity %d blocks, want above %d and at most the server's %d", c.CapacityBlocks, shrunk, full)
	}
}

// A server that loads the prompts the index predicted back from an
// offloading tier (vLLM's OffloadingConnector: its GPU pool evicted them)
// had them where the index said: the index keeps its capacity, as for hits
// in the GPU pool, and the tokens loaded are not taken for computed ones.
func TestTokensLoadedFromAnOffloadingTierAreHits(t *testing.T) {
	full := 272 * 16 * 4 / prefix.BlockSize
	for name, loaded := range map[string]bool{"loaded from a tier": true, "found on the GPU": false} {
		t.Run(name, func(t *testing.T) {
			p, ws, srv, req := calibrating(t)
			pickOne(t, p, ws, req)
			for range 40 {
				pickOne(t, p, ws, req) // the index predicts 125 blocks cached
				if loaded {
					srv.serveTier(1, 2050, 48, 1952, time.Millisecond, 20*time.Millisecond, 8)
				} else {
					srv.serve(1, 2050, 2000, time.Millisecond, 20*time.Millisecond, 8)
				}
				srv.scrape()
			}
			pickOne(t, p, ws, req)
			c := ws[0].Calibration()
			if c.CapacityBlocks != full || c.HitRatio < hitRecovered {
				t.Errorf("capacity %d blocks (%s), hit ratio %.2f; want the server's %d and at least %.2f",
					c.CapacityBlocks, c.CapacitySource, c.HitRatio, full, hitRecovered)
			}
			if got := c.PrefillPerToken; got < 990*time.Microsecond || got > 1010*time.Microsecond {
				t.Errorf("prefill per token = %v, want 1ms: the tokens loaded are not computed (%s)", got, c.PrefillSource)
			}
		})
	}
}

func TestConcurrencyLimitLearnedFromQueue(t *testing.T) {
	reg, ws := pool(1)
	clk := &clock{t: epoch}
	p := build(t, Config{}, reg, clk)
	srv := newServerSide(ws[0], clk, 1000)
	pickOne(t, p, ws, chat("a", "b", 100, 10))
	srv.m.Running, srv.m.Waiting = 3, 0
	srv.scrape()
	pickOne(t, p, ws, chat("a", "b", 100, 10))
	if got := ws[0].Calibration().MaxSeqs; got != 0 {
		t.Errorf("no queue seen: max seqs = %d, want 0 (unknown)", got)
	}
	srv.m.Running, srv.m.Waiting = 1, 1
	srv.scrape()
	pickOne(t, p, ws, chat("a", "b", 100, 10))
	if got := ws[0].Calibration().MaxSeqs; got != 0 {
		t.Errorf("one request waiting at one scrape: max seqs = %d, want 0 (unknown)", got)
	}
	srv.m.Running, srv.m.Waiting = 2, 4
	srv.scrape()
	pickOne(t, p, ws, chat("a", "b", 100, 10))
	srv.scrape()
	pickOne(t, p, ws, chat("a", "b", 100, 10))
	if got := ws[0].Calibration().MaxSeqs; got != 2 {
		t.Errorf("2 running while 4 wait at two scrapes: max seqs = %d, want 2", got)
	}
}

// pickOne returns the primary p picks for req among ws.
func pickOne(t *testing.T, p Policy, ws []*registry.Worker, req *Request) *registry.Worker {
	t.Helper()
	got, err := p.Pick(req, ws, 1)
	if err != nil {
		t.Fatalf("Pick: %v", err)
	}
	return got[0]
}

// With prefixes being reused, a prompt no worker holds goes to a worker
// whose cache has room rather than to an equally idle one that would have
// to evict a prompt it holds; with nothing reused, load alone decides.
func TestMissGoesWhereItEvictsNothing(t *testing.T) {
	reg, ws := pool(2)
	clk := &clock{t: epoch}
	p := build(t, Config{}, reg, clk)
	// Each server holds about two 8,200-byte prompts (272 × 16 tokens).
	newServerSide(ws[0], clk, 272)
	newServerSide(ws[1], clk, 272)
	a, b, c := chat("a", "q", 8000, 200), chat("b", "q", 8000, 200), chat("c", "q", 8000, 200)
	first := pickOne(t, p, ws, a)
	other := ws[0]
	if first == ws[0] {
		other = ws[1]
	}
	// b lands where a is not (the holder of a would evict nothing, but
	// the index has seen no reuse yet); then reuse a and b.
	g := first.Admit()
	if got := pickOne(t, p, ws, b); got != other {
		t.Fatalf("b went to %s, want the idle %s", got.Address(), other.Address())
	}
	g.Release()
	for range 5 {
		pickOne(t, p, ws, a)
		pickOne(t, p, ws, b)
	}
	// other holds b and has room for c; fill first with a second prompt
	// so that c would evict there.
	d := chat("d", "q", 8000, 200)
	reg2 := []*registry.Worker{first}
	pickOne(t, p, reg2, d)
	pickOne(t, p, reg2, a)
	// A request in flight on other: on load alone c would go to first.
	admit(t, other, 1)
	got := pickOne(t, p, ws, c)
	if got != other {
		t.Errorf("c went to %s, which holds two prompts and would evict one; want %s, which has room (one request in flight)", got.Address(), other.Address())
	}
}

// A pick that read a worker before it was removed may reach the calibrator
// after the registry told it to forget the worker; what that pick stores
// must not outlive the worker, whose ID never returns.
func TestCalibrationOfARemovedWorkerIsNotKept(t *testing.T) {
	reg, ws := pool(2)
	p := build(t, Config{}, reg, &clock{t: epoch})
	req := chat("sys", "q", 8000, 200)
	pickOne(t, p, ws, req)
	cal := p.(*engine).ranker.(*cacheAware).cal
	gone := ws[0]
	registrytest.Remove(reg, registry.Key{UID: "pod-0", Port: 8000})
	if cal.byID.of(gone) != nil {
		t.Fatal("the calibration of a removed worker was not forgotten")
	}
	gone.SetMetrics(&registry.Metrics{BlockSize: 16, NumGPUBlocks: 272, Scraped: epoch.Add(time.Second)})
	cal.refresh(gone) // the late pick's steps, in the order a pick takes them
	cal.sent(gone, 8200, 0)
	if cal.byID.of(gone) != nil {
		t.Error("a pick that ended after the worker's removal left its calibration behind")
	}
	if cal.byID.of(ws[1]) == nil {
		t.Error("the remaining worker has no calibration")
	}
}

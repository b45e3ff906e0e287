package policy

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/registry"
)

// Calibration bounds and rates.
const (
	// calibAlpha is the weight of a new sample in the moving averages: a
	// figure follows a change within about ten samples.
	calibAlpha = 0.2
	// minPrefillTokens, minDecodeTokens and minPromptTokens are the
	// smallest counts a sample is taken from.
	minPrefillTokens = 256
	minDecodeTokens  = 16
	minPromptTokens  = 16384
	// minPredicted is the predicted prefix hits, in tokens, a hit-ratio
	// check waits for: enough requests that the ones in flight at either
	// end of the window weigh little.
	minPredicted = 16384
	// hitShortfall: hits below this share of the prediction shrink the
	// capacity by shrinkStep, down to minScale; hits at or above
	// hitRecovered grow it back by growStep, up to 1.
	hitShortfall = 0.8
	hitRecovered = 0.95
	shrinkStep   = 0.85
	growStep     = 1.1
	minScale     = 0.25
	// bytesPerToken is the prompt bytes per token assumed until measured,
	// and the most the capacity is computed with: a measured figure only
	// ever shrinks it.
	bytesPerToken = 4
)

// calibrator learns each worker's prefill and decode cost, prompt bytes
// per token, KV capacity and concurrency limit from its scraped counters and
// from what the index predicted, and stores the result on the worker. Its
// learning state follows the registry: made when a worker joins, dropped
// when it leaves.
type calibrator struct {
	byID perWorker[workerCal]
}

// newCalibrator returns a calibrator for reg's workers.
func newCalibrator(reg *registry.Registry) *calibrator {
	c := &calibrator{}
	c.byID.follow(reg)
	return c
}

// workerCal is the learning state of one worker.
type workerCal struct {
	mu   sync.Mutex
	prev *registry.Metrics // last snapshot folded in
	// Counters at the last sample of each figure.
	prefillBase, decodeBase, promptBase, hitBase registry.Counters
	prefill                                      float64 // seconds per computed prompt token; 0 unknown
	meanPrefill                                  float64 // seconds of prefill per request; 0 unknown
	decode                                       float64 // seconds per output token; 0 unknown
	bpt                                          float64 // prompt bytes per token; 0 unknown
	scale                                        float64 // 1 from the first snapshot folded
	hitRatio                                     float64
	maxSeqs                                      int
	sentBytes                                    atomic.Int64 // prompt bytes routed here since the last prompt-token sample
	predicted                                    atomic.Int64 // prompt bytes the index said were cached here, since hitBase
}

// state returns w's learning state, nil for a worker whose joining has not
// settled yet or that has left: a pick that began before w was removed and
// gets here after stores nothing that would outlive w.
func (c *calibrator) state(w *registry.Worker) *workerCal { return c.byID.of(w) }

// refresh folds w's metrics into its calibration when they are newer than
// the last folded; a pick calls it for every candidate, and it costs one
// atomic load when nothing changed.
func (c *calibrator) refresh(w *registry.Worker) {
	m := w.Metrics()
	if m == nil {
		return
	}
	if cur := w.Calibration(); cur != nil && !cur.Scraped.Before(m.Scraped) {
		return
	}
	s := c.state(w)
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prev == m {
		return
	}
	s.fold(m)
	w.SetCalibration(s.snapshot(m))
}

// sent records a pick: prompt bytes routed to w, of which the index
// predicted cachedBytes to be in its cache.
func (c *calibrator) sent(w *registry.Worker, promptBytes, cachedBytes int) {
	s := c.state(w)
	if s == nil {
		return
	}
	s.sentBytes.Add(int64(promptBytes))
	s.predicted.Add(int64(cachedBytes))
}

// fold takes the samples m completes: each figure is sampled once its
// counters moved enough since the last sample. Called with s.mu held.
func (s *workerCal) fold(m *registry.Metrics) {
	first := s.prev == nil
	// Requests waiting at two scrapes in a row with as many running: the
	// server holds no more at once. (One waiting request may only be
	// waiting for the next step.)
	if prev := s.prev; prev != nil && m.Waiting > 0 && prev.Waiting > 0 && m.Running == prev.Running {
		s.maxSeqs = max(s.maxSeqs, m.Running)
	}
	s.prev = m
	b := m.Counters
	if first || b.PrefixQueries < s.prefillBase.PrefixQueries || b.PrefixHits < s.prefillBase.PrefixHits ||
		b.PromptTokens < s.prefillBase.PromptTokens || b.PrefillSeconds < s.prefillBase.PrefillSeconds ||
		b.DecodeSeconds < s.decodeBase.DecodeSeconds || b.PrefixHits < s.hitBase.PrefixHits ||
		b.TierHits < s.prefillBase.TierHits || b.TierHits < s.hitBase.TierHits {
		// The first snapshot, or a counter went back (the server
		// restarted): start over from here.
		if first {
			s.scale = 1
		}
		s.prefillBase, s.decodeBase, s.promptBase, s.hitBase = b, b, b, b
		s.sentBytes.Store(0)
		s.predicted.Store(0)
		return
	}
	if a := s.prefillBase; b.Prefills > a.Prefills {
		if computed := queried(b) - queried(a) - (b.PrefixHits - a.PrefixHits) - (b.TierHits - a.TierHits); computed >= minPrefillTokens {
			s.prefill = ewma(s.prefill, (b.PrefillSeconds-a.PrefillSeconds)/computed)
			s.meanPrefill = ewma(s.meanPrefill, (b.PrefillSeconds-a.PrefillSeconds)/(b.Prefills-a.Prefills))
			s.prefillBase = b
		}
	}
	if a := s.decodeBase; b.DecodeTokens-a.DecodeTokens >= minDecodeTokens {
		s.decode = ewma(s.decode, (b.DecodeSeconds-a.DecodeSeconds)/(b.DecodeTokens-a.DecodeTokens))
		s.decodeBase = b
	}
	if q := queried(b) - queried(s.promptBase); q >= minPromptTokens {
		if sent := s.sentBytes.Swap(0); sent > 0 {
			// Other clients of the server make the figure smaller, which
			// only ever shrinks the capacity it implies.
			s.bpt = ewma(s.bpt, min(16, max(1, float64(sent)/q)))
		}
		s.promptBase = b
	}
	s.checkHits(b)
}

// queried is the prompt tokens looked up in the prefix cache, or the prompt
// tokens when the server does not count lookups.
func queried(c registry.Counters) float64 {
	if c.PrefixQueries > 0 {
		return c.PrefixQueries
	}
	return c.PromptTokens
}

// checkHits compares the server's prefix hits since the last check with
// what the index predicted, once the prediction is large enough to judge.
// Tokens loaded back from an offloading tier are hits too: the prompt was
// where the index sent it, though no longer in the GPU pool.
func (s *workerCal) checkHits(now registry.Counters) {
	bpt := s.bytesPerToken()
	predicted := float64(s.predicted.Load()) / bpt
	if predicted < minPredicted || now.PrefixHits == 0 && now.PrefixQueries == 0 {
		return
	}
	hits := now.PrefixHits - s.hitBase.PrefixHits + now.TierHits - s.hitBase.TierHits
	s.hitBase = now
	s.predicted.Store(0)
	s.hitRatio = hits / predicted
	switch {
	case s.hitRatio < hitShortfall:
		s.scale = max(minScale, s.scale*shrinkStep)
	case s.hitRatio >= hitRecovered:
		s.scale = min(1, s.scale*growStep)
	}
}

func (s *workerCal) bytesPerToken() float64 {
	if s.bpt > 0 {
		return s.bpt
	}
	return bytesPerToken
}

// snapshot is the calibration the cost model reads. Called with s.mu held.
func (s *workerCal) snapshot(m *registry.Metrics) *registry.Calibration {
	c := &registry.Calibration{
		PrefillPerToken: seconds(s.prefill), DecodePerToken: seconds(s.decode),
		BytesPerToken: s.bytesPerToken(), CapacityScale: s.scale, HitRatio: s.hitRatio,
		MaxSeqs: s.maxSeqs, Scraped: m.Scraped,
	}
	c.MeanPrefill = seconds(s.meanPrefill)
	if f, ok := blocksPerLoad(1, DefaultPrefillWeight, c); ok {
		c.BlocksPerLoadScale = f
	}
	c.PrefillSource = source(s.prefill, "vllm:request_prefill_time_seconds / (prefix_cache_queries - hits - external hits)",
		"none yet: the configured blocksPerLoad (or a stickier one) applies")
	c.DecodeSource = source(s.decode, "vllm:inter_token_latency_seconds",
		"none yet: the configured blocksPerLoad (or a stickier one) applies")
	if s.maxSeqs > 0 {
		c.MaxSeqsSource = "vllm:num_requests_running while requests wait"
	} else {
		c.MaxSeqsSource = "not learned: no queue seen"
	}
	if m.NumGPUBlocks > 0 && m.BlockSize > 0 {
		tokens := float64(m.NumGPUBlocks) * float64(m.BlockSize)
		c.CapacityBlocks = kvBlocks(tokens, min(c.BytesPerToken, bytesPerToken)*s.scale)
		c.CapacitySource = "vllm:cache_config_info num_gpu_blocks × block_size"
		if s.bpt == 0 || s.bpt > bytesPerToken {
			c.CapacitySource += ", at most 4 bytes a token"
		} else {
			c.CapacitySource += ", measured bytes a token"
		}
		if s.scale < 1 {
			c.CapacitySource += ", shrunk: prefix hits below the index's prediction"
		}
	} else {
		c.CapacitySource = "not reported: the index's default capacity"
	}
	return c
}

func source(v float64, from, missing string) string {
	if v > 0 {
		return from
	}
	return missing
}

// seconds converts v seconds to a Duration, bounded at about 146 years:
// past the Duration range a float converts to an arbitrary integer.
func seconds(v float64) time.Duration {
	return time.Duration(min(v, maxSeconds) * float64(time.Second))
}

const maxSeconds = float64(math.MaxInt64/2) / float64(time.Second)

func ewma(old, sample float64) float64 {
	if math.IsNaN(sample) || math.IsInf(sample, 0) || sample <= 0 {
		return old
	}
	if old == 0 {
		return sample
	}
	return old + calibAlpha*(sample-old)
}

// blocksPerLoad is the calibrated exchange rate between uncached blocks and
// load on a worker, from a time model of the wait: a request in prefill
// ahead costs the server's mean prefill time (PrefillWeight units of load),
// and an uncached block costs its tokens × the prefill time per token. The
// rate is then the mean prefill time over PrefillWeight × a block's prefill
// time; prefill speed cancels out, and what is left is how many tokens the
// server computes for the requests it prefills. It is bounded by cfg/4 and
// cfg: never less sticky than configured. Without the figures it is cfg.
// It is shown in /debug/workers and not yet applied to picks: applied, it
// piled bursts and multi-turn sessions onto their warm worker, because a
// request ahead costs more than its prefill (it holds a running slot and
// decode steps), which the model leaves out.
func blocksPerLoad(cfg, prefillWeight float64, c *registry.Calibration) (float64, bool) {
	if c == nil || c.PrefillPerToken <= 0 || c.MeanPrefill <= 0 || prefillWeight <= 0 {
		return cfg, false
	}
	blockTokens := prefix.BlockSize / min(c.BytesPerToken, bytesPerToken)
	rate := float64(c.MeanPrefill) / (prefillWeight * blockTokens * float64(c.PrefillPerToken))
	return min(cfg, max(cfg/4, rate)), true
}

// evicted is the blocks the worker would have to drop to take the uncached
// part of a prompt (what it holds, held, plus uncached, beyond the capacity the
// index grants it), weighted by how often the traffic reuses a prefix
// (reuse, the index's hit ratio): a miss placed on a full worker costs a
// later miss for what it pushes out, on a worker with room none, and with
// prompts that share nothing none either.
func (x indexed) evicted(w *registry.Worker, held, uncached int, reuse float64) float64 {
	if uncached <= 0 || reuse <= 0 {
		return 0
	}
	bound := x.ix.Bound(capacityBlocks(w))
	return reuse * float64(min(uncached, max(0, held+uncached-bound)))
}

package registry

import "time"

// Calibration is what a policy learned about a worker's model server from
// its counters and the policy's own predictions: the figures its cost model
// uses in place of constants. Zero values mean "not learned"; each Source
// names the signal a figure came from, or why it falls back.
type Calibration struct {
	// PrefillPerToken is the wall time to prefill one uncached prompt token.
	PrefillPerToken time.Duration
	// MeanPrefill is the mean prefill time of a request.
	MeanPrefill   time.Duration
	PrefillSource string
	// DecodePerToken is the wall time between two output tokens.
	DecodePerToken time.Duration
	DecodeSource   string
	// BlocksPerLoadScale is the factor the cost model applies to its
	// configured exchange rate between uncached prompt blocks and load
	// (with the default prefill weight), from the prefill figures; 0 when
	// they are not known.
	BlocksPerLoadScale float64
	// BytesPerToken is prompt bytes sent per prompt token the server
	// counted.
	BytesPerToken float64
	// CapacityBlocks is the prefix-index capacity granted the worker, in
	// index blocks: its KV tokens × BytesPerToken, scaled by CapacityScale.
	CapacityBlocks int
	CapacitySource string
	// CapacityScale (≤ 1) shrinks the capacity when the server's prefix
	// hits stay below what the index predicted; HitRatio is the last
	// hits / predicted ratio, hits counting the tokens the server loaded
	// back from an offloading tier.
	CapacityScale float64
	HitRatio      float64
	// MaxSeqs is the server's concurrency limit, learned from the running
	// count while requests wait; 0 when not learned yet.
	MaxSeqs       int
	MaxSeqsSource string
	// Scraped is the time of the metrics last folded in.
	Scraped time.Time
}

// Calibration returns the worker's last calibration, or nil.
func (w *Worker) Calibration() *Calibration { return w.calib.Load() }

// SetCalibration stores a calibration.
func (w *Worker) SetCalibration(c *Calibration) { w.calib.Store(c) }

// LatencyFactors are how much slower than the policy's latency model a
// worker's requests have been (the policy's slo block): the mean ratio of
// observed to predicted time to first token and time per output token,
// over the samples counted. Nil until a first sample.
type LatencyFactors struct {
	TTFT, TPOT               float64
	TTFTSamples, TPOTSamples int
}

// LatencyFactors returns the worker's latency factors, nil until learned.
func (w *Worker) LatencyFactors() *LatencyFactors { return w.latency.Load() }

// SetLatencyFactors stores the worker's latency factors.
func (w *Worker) SetLatencyFactors(f *LatencyFactors) { w.latency.Store(f) }

package policy

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
)

// The predictor learns, from every request's observed latencies, a linear
// model of its time to first token (TTFT) and of its time per output token
// (TPOT) over what the picker knows of a pod when it picks it (features),
// times a factor of each pod's own: how much slower or faster than the
// model that pod has been. The model is fitted by recursive least squares
// with exponential forgetting, so it follows the traffic and the servers as
// they change; a pick reads a published copy of it without a lock.

// Features of a request on a pod.
const (
	fBias     = iota
	fUncached // prompt tokens the pod does not hold, in thousands
	fPrefill  // requests ahead of it in prefill: this picker's own and the others' waiting
	fRunning  // requests decoding there: this picker's own and the others' running
	fKV       // KV-cache usage, 0 to 1 (0 without fresh metrics)
	nFeatures
)

// features are a request's inputs to the predictor on one pod.
type features [nFeatures]float64

// Learning constants.
const (
	// forgetting is the weight left to a sample after each newer one: a
	// sample's weight halves in about 70 newer ones.
	forgetting = 0.99
	// initialSpread is the least-squares state's initial covariance, on
	// the diagonal: a weak prior of no effect for every feature.
	initialSpread = 100
	// maxSpread bounds the covariance's trace: without new information in
	// some direction (a pool whose pods are never full), forgetting would
	// grow it there without bound and the next sample there would swing
	// the fit. Each feature's variance is bounded by an equal share.
	maxSpread = 1e4
	// minSamples is the samples a model takes in before its predictions
	// are used: until then an objective is not judged.
	minSamples = 16
	// Each pod's factor is the mean of its observed / predicted ratios
	// over its first samples, then a moving average weighing a new one
	// factorAlpha, within [minFactor, maxFactor]. It is learned once the
	// model has taken in a sample for each feature.
	factorAlpha = 0.1
	minFactor   = 0.25
	maxFactor   = 4
	// minObserved is the shortest latency learned from; shorter ones are
	// mostly the clock's noise.
	minObserved = 10 * time.Microsecond
)

// Prediction is what the predictor expected of a request on the pod it was
// picked for, and what it expected it from. The caller hands one to Pick
// (Request.Predicted) and the latencies it then observes to ObserveTTFT and
// ObserveTPOT.
type Prediction struct {
	// TTFT and TPOT are the predicted latencies; 0 while a model has not
	// learned enough.
	TTFT, TPOT time.Duration
	worker     *registry.Worker
	x          features
}

// Made reports whether the pick made a prediction.
func (p *Prediction) Made() bool { return p != nil && p.worker != nil }

// Reset empties p for the next request.
func (p *Prediction) Reset() { *p = Prediction{} }

// LatencyObserver learns from the latencies a request observed on the pod
// its prediction was made for.
type LatencyObserver interface {
	ObserveTTFT(p *Prediction, ttft time.Duration)
	ObserveTPOT(p *Prediction, tpot time.Duration)
}

// fit is one latency's least-squares state.
type fit struct {
	theta features
	cov   [nFeatures][nFeatures]float64
	n     int
}

func newFit() fit {
	var f fit
	for i := range nFeatures {
		f.cov[i][i] = initialSpread
	}
	return f
}

// add takes in the sample (x, y).
func (f *fit) add(x *features, y float64) {
	var px features
	denom := forgetting
	for i := range nFeatures {
		for j := range nFeatures {
			px[i] += f.cov[i][j] * x[j]
		}
		denom += x[i] * px[i]
	}
	err := y - dot(&f.theta, x)
	for i := range nFeatures {
		f.theta[i] += px[i] / denom * err
		for j := range nFeatures {
			f.cov[i][j] -= px[i] * px[j] / denom
		}
	}
	// Forget: the covariance grows by 1/forgetting in every direction,
	// but no variance past maxSpread / nFeatures. Scaling row and column
	// i by the same d_i keeps it a covariance, and a feature that never
	// varies (a pool never full) stops growing there alone, so that the
	// others keep forgetting.
	var d features
	for i := range nFeatures {
		d[i] = 1 / math.Sqrt(forgetting)
		if v := f.cov[i][i] / forgetting; v > maxSpread/nFeatures {
			d[i] = math.Sqrt(maxSpread / nFeatures / f.cov[i][i])
		}
	}
	for i := range nFeatures {
		for j := range nFeatures {
			f.cov[i][j] *= d[i] * d[j]
		}
	}
	f.n++
	if !finite(&f.theta) { // a sample the state could not take: start over
		*f = newFit()
	}
}

func dot(a, b *features) float64 {
	s := 0.0
	for i := range nFeatures {
		s += a[i] * b[i]
	}
	return s
}

func finite(v *features) bool {
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// model is a published copy of the two fits' coefficients.
type model struct {
	ttft, tpot     features
	ttftOK, tpotOK bool // learned enough to be used
}

// predictor learns and predicts requests' latencies.
type predictor struct {
	cfg SLOConfig

	mu         sync.Mutex // serializes learning
	ttft, tpot fit
	published  atomic.Pointer[model]
}

func newPredictor(cfg SLOConfig) *predictor {
	p := &predictor{cfg: cfg, ttft: newFit(), tpot: newFit()}
	p.published.Store(&model{})
	return p
}

// featuresOf are the request's features on the candidate: its prompt
// tokens the candidate does not hold (the blocks the ranker matched there,
// for a policy with a prefix index), and the work there as engine.load
// splits it.
func featuresOf(p *pick, cd *candidate) features {
	uncached := float64(p.req.Tokens)
	if p.hashed && p.blocks > 0 {
		uncached *= float64(p.blocks-min(cd.matched, p.blocks)) / float64(p.blocks)
	}
	pre, dec := cd.w.Load()
	x := features{fBias: 1, fUncached: uncached / 1000, fPrefill: float64(pre), fRunning: float64(dec)}
	if m := cd.metrics; m != nil {
		others := max(int64(m.Running)+int64(m.Waiting)-m.Own, 0)
		queued := min(max(int64(m.Waiting)-m.OwnPrefill, 0), others)
		x[fPrefill] += float64(queued)
		x[fRunning] += float64(others - queued)
		x[fKV] = m.KVUsage
	}
	return x
}

// predict returns the predicted TTFT and TPOT, in seconds, of features x
// on w; 0 for a model that has not learned enough.
func (m *model) predict(w *registry.Worker, x *features) (ttft, tpot float64) {
	f := w.LatencyFactors()
	if m.ttftOK {
		ttft = max(dot(&m.ttft, x), 0)
		if f != nil && f.TTFTSamples > 0 {
			ttft *= f.TTFT
		}
	}
	if m.tpotOK {
		tpot = max(dot(&m.tpot, x), 0)
		if f != nil && f.TPOTSamples > 0 {
			tpot *= f.TPOT
		}
	}
	return ttft, tpot
}

// observe takes in one observed latency of a prediction: the pod's factor
// moves towards observed / predicted, and the model learns the latency as
// the pod would have taken it at a factor of 1.
func (p *predictor) observe(pr *Prediction, d time.Duration, tpot bool) {
	if !pr.Made() || d < minObserved {
		return
	}
	y := d.Seconds()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := &p.ttft
	if tpot {
		f = &p.tpot
	}
	next := registry.LatencyFactors{TTFT: 1, TPOT: 1}
	if cur := pr.worker.LatencyFactors(); cur != nil {
		next = *cur
	}
	factor, n := &next.TTFT, &next.TTFTSamples
	if tpot {
		factor, n = &next.TPOT, &next.TPOTSamples
	}
	if predicted := dot(&f.theta, &pr.x); f.n >= nFeatures && predicted > 0 {
		*n++
		alpha := max(factorAlpha, 1/float64(*n))
		*factor = min(max(*factor+alpha*(y/predicted-*factor), minFactor), maxFactor)
		pr.worker.SetLatencyFactors(&next)
	}
	y /= *factor
	f.add(&pr.x, y)
	p.published.Store(&model{
		ttft: p.ttft.theta, ttftOK: p.ttft.n >= minSamples,
		tpot: p.tpot.theta, tpotOK: p.tpot.n >= minSamples,
	})
}

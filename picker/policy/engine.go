package policy

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/registry"
)

// candidate is one live worker with room during a pick, or, when
// Request.Overflow finds none, one past the queue and KV-cache thresholds.
type candidate struct {
	w       *registry.Worker
	metrics *registry.Metrics // nil when absent or stale
	load    float64           // see engine.load
	matched int               // prompt blocks the worker holds (indexing policies)
	waiting int               // the estimated queue of a worker without fresh metrics (weighted.go)
	cost    float64           // set by the ranker: lower is better
	tie     uint64            // random tie-break
	session bool              // on the pod the request's session token names (session.go)
	tier    uint8             // for a request with objectives, tierMeets or tierMisses (slo.go)
	// inFlight is this picker's requests in flight on the worker, read
	// once by the weighted scorer's active-request score (loadscores.go).
	inFlight int64
}

// pick is the per-call state, pooled so a pick allocates only its result.
type pick struct {
	req     *Request
	cands   []candidate
	rng     uint64   // splitmix64 state, seeded per pick
	hashes  []uint64 // the prompt's: own's, or the request's (Request.Hashes)
	own     Hashes
	blocks  int  // len(hashes), when the ranker hashed the prompt
	hashed  bool // hashes, blocks and matches are set
	ordered bool // the candidates' ties follow the prompt's rendezvous order (home.go)
	over    bool // the candidates are past the thresholds: none has room (Request.Overflow)
	// The prompt's home key and its blocks, once keyed (home.go).
	keyed     bool
	key       uint64
	keyBlocks int
	matches   []prefix.Match
	pool      []*registry.Worker // the sampled candidates of a large pool
	others    float64            // othersPerOwn of the candidates
	measured  bool               // whether othersPerOwn had anything to measure
	scratch   prefix.Scratch
	matched   map[uint32]int
	// The requested model's key in the LoRA decision table, once needed.
	adapterHash uint64
	adapterSet  bool
	// cold: no candidate holds a block of the prompt, and stamps the
	// candidates' last cold picks (the weighted scorer's no-hit score,
	// loadscores.go).
	cold   bool
	stamps []uint64
	// The candidates whose context-length range the filter found the
	// prompt out of, and whether it was shorter than one of those ranges
	// (contextlength.go).
	outOfRange   int
	shortOfRange bool
	// unlabelled counts the candidates the stage's label filters left
	// out (labels.go).
	unlabelled int
}

// rand returns the next number of the pick's private generator.
func (p *pick) rand() uint64 {
	p.rng += 0x9e3779b97f4a7c15
	z := p.rng
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// ranker sets the cost of every candidate of a pick.
type ranker interface {
	rank(e *engine, p *pick)
}

// chooser is told the primary a pick returned.
type chooser interface {
	chose(e *engine, p *pick, primary *registry.Worker)
}

// engine runs the steps every policy shares: it drops removed and saturated
// candidates, measures load, lets the ranker set costs and returns the
// cheapest distinct candidates, ties broken at random.
type engine struct {
	cfg     Config
	pin     bool // session affinity pins (session.go)
	prefer  bool // session affinity scores (weighted.go)
	ids     bool // the session is an id, hashed to its pod (session.go)
	now     func() time.Time
	ranker  ranker
	workers func() []*registry.Worker // the whole pool, or nil

	mu  sync.Mutex
	rnd *rand.Rand

	pool    sync.Pool
	filters filterCache // models.go

	// ranged: the candidates are filtered by the prompt's length
	// (contextLength.filter).
	ranged bool
	// labels are the label filters of a request's pick (Config.LabelFilters)
	// and of a prefill pick (DisaggregationConfig.PrefillLabelFilters); nil
	// keeps every worker.
	labels, prefillLabels labelMatcher

	// slo predicts requests' latencies (Config.SLO); nil without.
	slo *predictor
}

var _ Policy = (*engine)(nil)

func newEngine(cfg Config, o options, r ranker) *engine {
	e := &engine{cfg: cfg, now: o.clock.Now, rnd: o.rand, ranker: r, workers: o.workers}
	if sa := cfg.SessionAffinity; sa != nil {
		e.pin, e.prefer, e.ids = sa.Mode == SessionPin, sa.Mode == SessionPrefer, sa.Key == SessionID
	}
	if cl := cfg.ContextLength; cl != nil {
		e.ranged = cl.Filter
	}
	keys := cfg.LabelKeys()
	e.labels = newLabelMatcher(cfg.LabelFilters, keys)
	if d := cfg.Disaggregation; d != nil {
		e.prefillLabels = newLabelMatcher(d.PrefillLabelFilters, keys)
	}
	e.pool.New = func() any { return &pick{matched: map[uint32]int{}} }
	return e
}

// Pick implements Policy.
func (e *engine) Pick(req *Request, candidates []*registry.Worker, n int) ([]*registry.Worker, error) {
	return e.AppendPick(nil, req, candidates, n)
}

// AppendPick is Pick appending the workers to dst, for a caller that keeps
// one slice from pick to pick. On error dst is returned as it came.
func (e *engine) AppendPick(dst []*registry.Worker, req *Request, candidates []*registry.Worker, n int) ([]*registry.Worker, error) {
	if req == nil {
		req = &Request{}
	}
	n = max(n, 1)
	p := e.pool.Get().(*pick)
	defer func() {
		p.req, p.matches, p.hashes = nil, nil, nil
		clear(p.cands) // drop worker pointers before pooling
		p.cands = p.cands[:0]
		clear(p.pool)
		p.pool = p.pool[:0]
		e.pool.Put(p)
	}()
	p.req, p.blocks, p.hashed, p.ordered, p.keyed, p.adapterSet, p.over, p.cold = req, 0, false, false, false, false, false, false
	p.outOfRange, p.shortOfRange, p.unlabelled = 0, false, 0
	e.mu.Lock()
	p.rng = e.rnd.Uint64()
	e.mu.Unlock()

	var filter modelFilter
	var err error
	if req.Subset { // a list of the caller's, which it may reuse
		var pool []*registry.Worker
		if e.workers != nil {
			pool = e.workers()
		}
		filter, err = newModelFilter(req.Model, candidates, pool)
	} else {
		filter, err = e.filters.get(req.Model, candidates)
	}
	if err != nil {
		return dst, err
	}
	now := e.now()
	onPod, sampled, err := e.prepare(p, candidates, &filter, now, true)
	if err != nil {
		return dst, err
	}
	e.ranker.rank(e, p)
	var m *model // the latency model the pick is judged and predicted by
	if e.slo != nil {
		m = e.slo.published.Load()
		missed, err := e.judge(p, m)
		if missed && sampled {
			// No pod of the sample is predicted to meet the request's
			// objectives: one of the rest may be, and a sampled pick
			// never refuses or misroutes what a full look would place.
			p.dropCandidates()
			if onPod, _, err = e.prepare(p, candidates, &filter, now, false); err != nil {
				return dst, err
			}
			e.ranker.rank(e, p)
			_, err = e.judge(p, m)
		}
		if err != nil {
			return dst, err
		}
	}
	primary := len(dst)
	if onPod && e.pin {
		dst = appendPinned(dst, p.cands, n)
	} else {
		dst = appendCheapest(dst, p.cands, n)
	}
	if e.slo != nil && req.Predicted != nil {
		e.predicted(p, m, dst[primary], req.Predicted)
	}
	if c, ok := e.ranker.(chooser); ok {
		c.chose(e, p, dst[primary])
	}
	return dst, nil
}

// prepare makes the pick's candidates of candidates, of a sample of them
// when the ranker samples a large pool and sample allows, and measures
// their load; it reports whether the request's session pod is among them
// and whether they are a sample. With no candidate it returns why.
func (e *engine) prepare(p *pick, candidates []*registry.Worker, filter *modelFilter, now time.Time, sample bool) (onPod, sampled bool, err error) {
	saturated := 0
	if s, ok := e.ranker.(sampler); ok && sample && len(candidates) > sampleAbove && !p.req.Subset {
		saturated = e.admit(p, s.sample(e, p, candidates), filter, now)
		if p.over { // the pool may have room the sample has not
			p.dropCandidates()
		}
		sampled = len(p.cands) > 0
	}
	if len(p.cands) == 0 { // a small pool, or none of the sample can take it
		saturated = e.admit(p, candidates, filter, now)
	}
	onPod = (e.pin || e.prefer) && e.markSession(p, candidates, sampled, filter, now)
	p.others, p.measured = othersPerOwn(p.cands)
	for i := range p.cands {
		p.cands[i].load = e.load(p.cands[i].w, p.cands[i].metrics, p.others)
	}
	if len(p.cands) == 0 {
		switch {
		case saturated > 0:
			return false, false, ErrSaturated
		case p.outOfRange > 0: // pods the label filters keep, none in range
			return false, false, p.rangeError()
		case p.unlabelled > 0:
			return false, false, ErrLabelFilter
		}
		return false, false, ErrNoCandidates
	}
	return onPod, sampled, nil
}

// admit makes candidates of the workers of ws that are live, serve the
// model, pass the label filters of the pick's stage, take its prompt's
// length (with contextLength.filter) and have room for the request, and
// returns how many had none. With Request.Overflow and none with room, the
// candidates are those past the queue and KV-cache thresholds alone, and
// p.over is set.
func (e *engine) admit(p *pick, ws []*registry.Worker, filter *modelFilter, now time.Time) (saturated int) {
	for _, w := range ws {
		if e.admitOne(p, w, filter, now) {
			saturated++
		}
	}
	return saturated
}

// admitOne makes a candidate of w when it is live, serves the model,
// passes the label filters of the pick's stage, takes the prompt's length
// (with contextLength.filter) and has room for the request, and reports
// whether it had none. A worker past the queue and KV-cache thresholds
// alone (not at the in-flight cap) is made a candidate too under
// Request.Overflow while no candidate has room; the first with room then
// takes the place of those.
func (e *engine) admitOne(p *pick, w *registry.Worker, filter *modelFilter, now time.Time) (saturated bool) {
	if w == nil || w == p.req.Exclude || !w.Live() || !filter.admits(w) {
		return false
	}
	// The label filters first: a pod they leave out has no say in a
	// context-length refusal.
	if m := e.stageLabels(p.req); m != nil && !p.labelled(m, w) || e.ranged && !p.inRange(w) {
		return false
	}
	m := w.Metrics()
	if m != nil && !m.Fresh(now, e.cfg.MetricsStaleness.Duration) {
		m = nil
	}
	switch capped, over := e.saturated(w, m, p.req.Reserve); {
	case capped || over && (!p.req.Overflow || len(p.cands) > 0 && !p.over):
		return true
	case over:
		p.over = true
		p.cands = append(p.cands, candidate{w: w, metrics: m, tie: p.rand()})
		return true
	}
	if p.over {
		p.dropCandidates()
	}
	p.cands = append(p.cands, candidate{w: w, metrics: m, tie: p.rand()})
	return false
}

// stageLabels returns the label filters of req's pick: the prefill
// stage's for a prefill pick, else the request's.
func (e *engine) stageLabels(req *Request) labelMatcher {
	if req.Prefill {
		return e.prefillLabels
	}
	return e.labels
}

// dropCandidates empties the pick's candidates.
func (p *pick) dropCandidates() {
	clear(p.cands)
	p.cands, p.over = p.cands[:0], false
}

// saturated reports whether w may take no more work of a request that
// leaves reserve places free: capped when it is at the in-flight cap, over
// when its fresh metrics show a full queue and a full KV cache. Either
// bound less reserve is at least 1.
func (e *engine) saturated(w *registry.Worker, m *registry.Metrics, reserve int) (capped, over bool) {
	if e.cfg.MaxInFlight > 0 && w.InFlight() >= int64(reduced(e.cfg.MaxInFlight, reserve)) {
		return true, false
	}
	return false, m != nil && m.Waiting >= reduced(e.cfg.QueueThreshold, reserve) && m.KVUsage >= e.cfg.KVCacheThreshold
}

// reduced is bound less reserve, never below 1 when a reserve applies.
func reduced(bound, reserve int) int {
	if reserve <= 0 {
		return bound
	}
	return max(bound-reserve, 1)
}

// load is the work ahead of a new request on w: this picker's own requests,
// counted exactly by their guards (those in prefill weighted by
// PrefillWeight), plus the requests others sent there (other picker
// replicas, direct clients), when the metrics are fresh.
//
// The others' share is the model server's running + waiting less what this
// picker had in flight there when the page was read, never negative, so no
// request is counted twice; the part still queued beyond this picker's own
// prefill weighs PrefillWeight. The figure is as old as the scrape (one
// interval at most, and never older than MetricsStaleness). In between,
// replicas that route alike add and finish work where this one does: the
// others' share moves by r (othersPerOwn) times the change of this picker's
// own count since the scrape, new work weighing as prefill.
func (e *engine) load(w *registry.Worker, m *registry.Metrics, r float64) float64 {
	pre, dec := w.Load()
	l := e.cfg.PrefillWeight*float64(pre) + float64(dec)
	if m == nil {
		return l
	}
	others := max(int64(m.Running)+int64(m.Waiting)-m.Own, 0)
	queued := min(max(int64(m.Waiting)-m.OwnPrefill, 0), others)
	theirs := e.cfg.PrefillWeight*float64(queued) + float64(others-queued)
	if g := r * float64(pre+dec-m.Own); g > 0 {
		theirs += e.cfg.PrefillWeight * g
	} else {
		theirs = max(theirs+g, 0)
	}
	return l + theirs
}

// maxOthersPerOwn bounds othersPerOwn.
const maxOthersPerOwn = 16

// othersPerOwn is how many requests others had in flight for each of this
// picker's, over the candidates with fresh metrics at their scrapes: about
// the number of other replicas when replicas share the traffic evenly, 0
// for a lone picker. It is 0 and not measured when this picker had nothing
// in flight.
func othersPerOwn(cs []candidate) (r float64, measured bool) {
	var own, others int64
	for i := range cs {
		if m := cs[i].metrics; m != nil {
			own += m.Own
			others += max(int64(m.Running)+int64(m.Waiting)-m.Own, 0)
		}
	}
	if own == 0 {
		return 0, false
	}
	return min(float64(others)/float64(own), maxOthersPerOwn), true
}

// appendCheapest appends to dst up to n distinct workers of cs by ascending
// cost, ties broken by the random tie key.
func appendCheapest(dst []*registry.Worker, cs []candidate, n int) []*registry.Worker {
	base := len(dst)
	dst = slices.Grow(dst, min(n, len(cs)))
	for k := 0; k < len(cs) && len(dst)-base < n; k++ {
		best := k
		for i := k + 1; i < len(cs); i++ {
			if less(&cs[i], &cs[best]) {
				best = i
			}
		}
		cs[k], cs[best] = cs[best], cs[k]
		if !contains(dst[base:], cs[k].w) {
			dst = append(dst, cs[k].w)
		}
	}
	return dst
}

func less(a, b *candidate) bool {
	if a.tier != b.tier {
		return a.tier < b.tier
	}
	if a.cost != b.cost {
		return a.cost < b.cost
	}
	return a.tie < b.tie
}

func contains(ws []*registry.Worker, w *registry.Worker) bool {
	for _, x := range ws {
		if x == w {
			return true
		}
	}
	return false
}

// capacityBlocks is the worker's KV capacity in prefix blocks: its KV blocks
// × tokens per block × the prompt bytes per token, as calibrated (see
// calibrate.go), else assuming about 4 bytes a token; 0 when unknown (the
// index then uses its default). Metrics of any age will do: the capacity is
// configuration, not load.
func capacityBlocks(w *registry.Worker) int {
	if c := w.Calibration(); c != nil && c.CapacityBlocks > 0 {
		return c.CapacityBlocks
	}
	m := w.Metrics()
	if m == nil || m.NumGPUBlocks <= 0 || m.BlockSize <= 0 {
		return 0
	}
	return kvBlocks(float64(m.NumGPUBlocks)*float64(m.BlockSize), bytesPerToken)
}

// maxCapacityBlocks bounds a worker's KV capacity in prefix blocks. It is
// far above any bound the index keeps a worker to, and keeps the figure an
// int on any platform whatever num_gpu_blocks a server reports: a float
// beyond the int range converts to an arbitrary int (on amd64 the most
// negative one, which became a capacity of 1 block).
const maxCapacityBlocks = math.MaxInt32

// kvBlocks is the prefix blocks that tokens of KV cache hold at
// bytesPerToken prompt bytes a token, in [1, maxCapacityBlocks].
func kvBlocks(tokens, bytesPerToken float64) int {
	b := tokens * bytesPerToken / prefix.BlockSize
	switch {
	case !(b >= 1): // also NaN
		return 1
	case b >= maxCapacityBlocks:
		return maxCapacityBlocks
	}
	return int(b)
}

package policy

import (
	"math"

	"github.com/inferpick/inferpick/picker/registry"
)

// weightedScorer is the upstream endpoint picker's default: a weighted sum
// of a queue score, a KV-cache score and a prefix score, the highest total
// winning. The engine's part is to clamp each score to [0,1].
type weightedScorer struct {
	indexed
	cfg  WeightedScorerConfig
	lora *loraAffinity
	// noHit is nil unless the no-hit score is weighted (loadscores.go).
	noHit *noHitStamps
}

func (s *weightedScorer) rank(e *engine, p *pick) {
	s.match(p)
	v := surveyFresh(p.cands)
	lv := s.surveyLoad(p)
	for i := range p.cands {
		cd := &p.cands[i]
		queue, kv := v.scores(cd)
		pfx := 0.0
		if p.blocks > 0 {
			pfx = float64(cd.matched) / float64(p.blocks)
		}
		cd.cost = -(s.cfg.QueueWeight*clamp01(queue) + s.cfg.KVWeight*clamp01(kv) + s.cfg.PrefixWeight*clamp01(pfx)) - s.loadScores(&lv, p, i)
		if s.cfg.LoRAWeight > 0 {
			cd.cost -= s.cfg.LoRAWeight * clamp01(s.lora.score(p, cd))
		}
		if s.cfg.ContextLengthWeight > 0 {
			cd.cost -= s.cfg.ContextLengthWeight * clamp01(contextScore(p.req.Tokens, cd.w.ContextRange()))
		}
		if e.prefer && cd.session {
			cd.cost -= s.cfg.SessionWeight
		}
	}
}

// freshView is what the candidates with fresh metrics say, against which
// the weighted scorer judges a candidate without them. A server whose
// /metrics stops answering is most often one too loaded to answer, so such
// a candidate must not score as an idle one: its queue is read from this
// picker's own requests in flight on it, and its KV-cache score is the
// fresh candidates' mean.
type freshView struct {
	maxWaiting int // over the fresh candidates and the estimates of the others
	minWaiting int // the shortest fresh queue
	// minOwn is this picker's in-flight count on the least loaded fresh
	// candidate (the fewest waiting, then the fewest in flight).
	minOwn int64
	kvMean float64 // the fresh candidates' mean KV-cache score
}

// surveyFresh summarises the fresh candidates of cs, and, when some
// candidate has no fresh metrics, sets its waiting to its estimate and
// widens maxWaiting to it. The estimate reads the worker's in-flight count
// once, so its score and the others' normalisation agree, though the count
// changes under a pick.
func surveyFresh(cs []candidate) freshView {
	v := freshView{kvMean: neutralKV}
	kv, fresh := 0.0, 0
	for i := range cs {
		m := cs[i].metrics
		if m == nil {
			continue
		}
		if fresh == 0 || m.Waiting < v.minWaiting {
			v.minWaiting = m.Waiting
		}
		v.maxWaiting = max(v.maxWaiting, m.Waiting)
		kv += 1 - m.KVUsage
		fresh++
	}
	if fresh == len(cs) {
		return v
	}
	if fresh > 0 {
		v.kvMean = kv / float64(fresh)
		v.minOwn = leastLoadedOwn(cs, v.minWaiting)
	}
	for i := range cs {
		if cs[i].metrics == nil {
			cs[i].waiting = v.waiting(cs[i].w)
			v.maxWaiting = max(v.maxWaiting, cs[i].waiting)
		}
	}
	return v
}

// neutralKV is the KV-cache score of a candidate without fresh metrics
// when no candidate has any: the same for all, it leaves the order to the
// queue and prefix scores.
const neutralKV = 0.5

// leastLoadedOwn is this picker's in-flight count on the fresh candidate of
// cs with waiting requests queued and the fewest in flight.
func leastLoadedOwn(cs []candidate, waiting int) int64 {
	own := int64(-1)
	for i := range cs {
		if m := cs[i].metrics; m != nil && m.Waiting == waiting {
			if n := cs[i].w.InFlight(); own < 0 || n < own {
				own = n
			}
		}
	}
	return max(own, 0)
}

// waiting estimates the queue of a worker without fresh metrics as the
// least loaded fresh candidate's queue, longer or shorter by how many more
// or fewer requests this picker has in flight on it; with no fresh
// candidate, as its in-flight count. So a worker whose metrics stopped
// answering takes its turn while it holds no more than the others, and
// scores worse than the least loaded of them as soon as it holds more.
func (v *freshView) waiting(w *registry.Worker) int {
	n := int64(v.minWaiting) + w.InFlight() - v.minOwn
	return int(min(max(n, 0), math.MaxInt32))
}

// scores returns cd's queue and KV-cache scores, once surveyFresh has
// estimated the queue of a candidate without fresh metrics.
func (v *freshView) scores(cd *candidate) (queue, kv float64) {
	waiting := 0
	if m := cd.metrics; m != nil {
		waiting, kv = m.Waiting, 1-m.KVUsage
	} else {
		waiting, kv = cd.waiting, v.kvMean
	}
	queue = 1
	if v.maxWaiting > 0 {
		queue = 1 - float64(waiting)/float64(v.maxWaiting)
	}
	return queue, kv
}

// clamp01 bounds a score to [0,1]; NaN counts as 0.
func clamp01(x float64) float64 {
	if !(x > 0) {
		return 0
	}
	return min(x, 1)
}

package policy

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/inferpick/inferpick/picker/registry"
)

// The weighted scorer's load scores beside the queue and KV-cache scores
// (LoadScores), each as the upstream scorer of its name computes it, from
// what this picker has: its own requests in flight (the guards' count),
// the scraped running and waiting requests, and, for the no-hit score,
// when each pod was last sent a prompt no pod held.

// loadSurvey is what the load scores of one pick compare a candidate with.
type loadSurvey struct {
	// maxOwn is the most requests this picker has in flight on a
	// candidate (candidate.inFlight, read once per pick).
	maxOwn int64
	// The fewest and most running requests of the candidates with fresh
	// metrics, and their mean, which a candidate without them is scored
	// by: neither idle nor the busiest.
	minRun, maxRun int
	meanRun        float64
	// cold: no candidate holds a block of the prompt, or no prefix score
	// is weighted.
	cold bool
	// weighted: some load score is weighted.
	weighted bool
}

// surveyLoad reads what the weighted load scores of p need, once, and
// nothing when none is weighted.
func (s *weightedScorer) surveyLoad(p *pick) (v loadSurvey) {
	l := &s.cfg.LoadScores
	if v.weighted = l.weighted(); !v.weighted {
		return v
	}
	if l.ActiveRequestWeight > 0 {
		for i := range p.cands {
			cd := &p.cands[i]
			cd.inFlight = cd.w.InFlight()
			v.maxOwn = max(v.maxOwn, cd.inFlight)
		}
	}
	if l.RunningWeight > 0 {
		sum, fresh := 0, 0
		for i := range p.cands {
			if m := p.cands[i].metrics; m != nil {
				if fresh == 0 || m.Running < v.minRun {
					v.minRun = m.Running
				}
				v.maxRun = max(v.maxRun, m.Running)
				sum += m.Running
				fresh++
			}
		}
		if fresh > 0 {
			v.meanRun = float64(sum) / float64(fresh)
		}
	}
	if l.NoHitLRUWeight > 0 {
		// Without a prefix score the no-hit score sees no match, as
		// upstream's sees none without a prefix-cache-scorer.
		v.cold = true
		for i := range p.cands {
			if s.cfg.PrefixWeight > 0 && p.cands[i].matched > 0 {
				v.cold = false
				break
			}
		}
		p.cold = v.cold
		if v.cold {
			s.noHit.rank(p)
		}
	}
	return v
}

// loadScores is the weighted sum of candidate i's load scores; surveyFresh
// has set the queue estimate of a candidate without fresh metrics. It is
// inlined: a pick with no load score weighted pays one test a candidate.
func (s *weightedScorer) loadScores(v *loadSurvey, p *pick, i int) float64 {
	if !v.weighted {
		return 0
	}
	return s.sumLoadScores(v, p, i)
}

func (s *weightedScorer) sumLoadScores(v *loadSurvey, p *pick, i int) float64 {
	l := &s.cfg.LoadScores
	cd := &p.cands[i]
	sum := 0.0
	if l.ActiveRequestWeight > 0 {
		sum += l.ActiveRequestWeight * clamp01(l.ActiveRequest.score(cd.inFlight, v.maxOwn))
	}
	if l.RunningWeight > 0 {
		sum += l.RunningWeight * clamp01(v.running(cd))
	}
	if l.LoadAwareWeight > 0 {
		sum += l.LoadAwareWeight * clamp01(loadAware(waitingOf(cd), l.LoadAwareThreshold))
	}
	if l.NoHitLRUWeight > 0 {
		score := 0.5
		if v.cold {
			score = noHitScore(p, i)
		}
		sum += l.NoHitLRUWeight * clamp01(score)
	}
	return sum
}

// score is the active-request score of a pod holding own requests of this
// picker's when the busiest candidate holds most.
func (a ActiveRequestScore) score(own, most int64) float64 {
	if own <= int64(a.IdleThreshold) {
		return 1
	}
	return float64(most-own) / float64(most) * a.MaxBusyScore
}

// running is cd's running score: its scraped running requests against the
// fewest and most of the fresh candidates; a candidate without fresh
// metrics counts the fresh candidates' mean, and with none fresh all
// score 1.
func (v *loadSurvey) running(cd *candidate) float64 {
	if v.maxRun == v.minRun {
		return 1
	}
	r := v.meanRun
	if m := cd.metrics; m != nil {
		r = float64(m.Running)
	}
	return (float64(v.maxRun) - r) / float64(v.maxRun-v.minRun)
}

// waitingOf is cd's waiting queue: scraped, or estimated by surveyFresh.
func waitingOf(cd *candidate) int {
	if m := cd.metrics; m != nil {
		return m.Waiting
	}
	return cd.waiting
}

// loadAware is llm-d's load-aware score of a queue of waiting requests.
func loadAware(waiting, threshold int) float64 {
	if waiting <= 0 {
		return 0.5
	}
	return 0.5 * (1 - float64(min(waiting, threshold))/float64(threshold))
}

// noHitStamps remember, per worker, when it was last the primary of a
// prompt no candidate held (a cold pick), as the number of cold picks
// made by then. Each worker has a stamp of its own, made when it joins the
// registry and dropped when it leaves (perWorker); picks read and write
// the stamps without a lock.
type noHitStamps struct {
	picks  atomic.Uint64
	stamps perWorker[atomic.Uint64]
}

// newNoHitStamps returns stamps that follow reg's workers.
func newNoHitStamps(reg *registry.Registry) *noHitStamps {
	t := &noHitStamps{}
	t.stamps.follow(reg)
	return t
}

// chose stamps the primary of a cold pick. A worker whose joining has not
// settled yet has no stamp, and stays never sent one.
func (t *noHitStamps) chose(p *pick, primary *registry.Worker) {
	if !p.cold {
		return
	}
	if s := t.stamps.of(primary); s != nil {
		s.Store(t.picks.Add(1))
	}
}

// rank reads each candidate's stamp into p.stamps[:n] and the same sorted
// into p.stamps[n:], in the pick's own scratch.
func (t *noHitStamps) rank(p *pick) {
	n := len(p.cands)
	p.stamps = slices.Grow(p.stamps[:0], 2*n)[:2*n]
	byID := t.stamps.all()
	for i := range p.cands {
		p.stamps[i] = 0 // never sent one, or its joining not settled yet
		if s := byID[p.cands[i].w.ID()]; s != nil {
			p.stamps[i] = s.Load()
		}
	}
	sorted := p.stamps[n:]
	copy(sorted, p.stamps[:n])
	slices.Sort(sorted)
}

// noHitScore is candidate i's score for a cold prompt: 1 − r/(n−1), r the
// candidates whose last cold pick is older than its own (a pod never sent
// one being oldest), so every such pod scores 1 and the most recent 0.
func noHitScore(p *pick, i int) float64 {
	n := len(p.cands)
	if n <= 1 {
		return 1
	}
	r, _ := slices.BinarySearch(p.stamps[n:2*n], p.stamps[i])
	return 1 - float64(r)/float64(n-1)
}

// validate reports the bad fields of the load scores.
func (l LoadScores) validate() []error {
	var errs []error
	for _, f := range []struct {
		field string
		w     float64
	}{
		{"weightedScorer.activeRequestWeight", l.ActiveRequestWeight},
		{"weightedScorer.runningRequestsWeight", l.RunningWeight},
		{"weightedScorer.loadAwareWeight", l.LoadAwareWeight},
		{"weightedScorer.noHitLRUWeight", l.NoHitLRUWeight},
	} {
		if !atLeast(f.w, 0) {
			errs = append(errs, fmt.Errorf("%s: %v is invalid: must be a finite number ≥ 0", f.field, f.w))
		}
	}
	if l.ActiveRequest.IdleThreshold < 0 {
		errs = append(errs, fmt.Errorf("weightedScorer.activeRequest.idleThreshold: %d is invalid: must be ≥ 0", l.ActiveRequest.IdleThreshold))
	}
	if !within(l.ActiveRequest.MaxBusyScore, 0, 1) {
		errs = append(errs, fmt.Errorf("weightedScorer.activeRequest.maxBusyScore: %v is invalid: must be in [0,1]", l.ActiveRequest.MaxBusyScore))
	}
	if l.LoadAwareThreshold < 0 {
		errs = append(errs, fmt.Errorf("weightedScorer.loadAwareThreshold: %d is invalid: must be ≥ 0 (0: %d)", l.LoadAwareThreshold, DefaultLoadAwareThreshold))
	}
	return errs
}

package policy

// cacheAware sends a request where its prompt is cached, unless the load
// there outweighs the cache. After each pick the primary is recorded in the
// index as holding the whole prompt.
//
// ModeCost (the default) estimates what the request waits for on each
// worker, in units of load (one decoding request; a request in prefill
// counts PrefillWeight): the load queued there plus the prefill of the
// blocks the worker does not hold, BlocksPerLoad blocks weighing one unit.
// A warm worker keeps a prompt until its extra load outweighs the prefill
// the cache saves, so long shared prefixes stick harder than short ones. On
// the routing simulation in sim_test.go it beats ModeThreshold and the
// weighted scorer on hit ratio and TTFT, with even and with skewed tenants.
//
// ModeThreshold is the classic rule: longest match above MatchThreshold of
// the prompt, least loaded among those, unless that worker is overloaded
// relative to the pool (load > mean × BalanceRel and > mean + BalanceAbs);
// otherwise the least loaded worker.
type cacheAware struct {
	indexed
	cfg   CacheAwareConfig
	lora  *loraAffinity
	reuse recent         // home.go
	peers recent         // others' requests per own, presumed 1 until measured
	lists candidateLists // sample.go
}

func (c *cacheAware) rank(e *engine, p *pick) {
	c.match(p)
	if c.cfg.Mode == ModeThreshold {
		c.rankThreshold(p)
		return
	}
	// Cost: the work queued ahead plus the prefill this request brings,
	// counting only the blocks the worker does not hold (home.go: the
	// prompt's home is presumed to hold them all), the blocks they would
	// evict from a full worker (calibrate.go) and the adapter it would
	// load (lora.go).
	reuse := c.ix.HitRatio()
	home := c.home(e, p)
	if p.measured {
		c.peers.add(min(p.others, 1))
	}
	parked := p.ordered && c.peers.rate() < aloneOthers
	for i := range p.cands {
		cd := &p.cands[i]
		uncached := p.blocks - cd.matched
		held := 0 // what the worker holds, read only when something needs it
		if parked || (uncached > 0 && reuse > 0) {
			held = c.ix.Held(cd.w.ID())
		}
		cd.cost = cd.load + (float64(uncached)+c.evicted(cd.w, held, uncached, reuse))/c.cfg.BlocksPerLoad +
			c.lora.cost(p, cd, c.cfg.AdapterLoadCost) - c.homeCredit(p, i, home) + c.orderCost(p, i)
		if parked {
			cd.tie = parkedFirst(held, cd.tie)
		}
	}
}

// aloneOthers is the recent othersPerOwn (peers) below which a picker
// routes as if alone: under one request of others' for every four of its
// own. Until the servers' figures have shown it, a picker presumes peers,
// unless deployed as the only one (CacheAwareConfig.Replicas).
const aloneOthers = 0.25

// parkedFirst is the tie key of a worker holding held blocks, for a picker
// alone: of the workers whose costs tie (idle ones, for a prompt none
// holds), the one holding the fewest blocks first, then the prefix's own
// order. The blocks a worker holds are the conversations parked there,
// whose next turns will queue with whatever goes there now: a new
// conversation should join the fewest. Replicas keep the prefix's order
// alone, since each counts only the blocks it routed itself and they must
// choose alike.
func parkedFirst(held int, tie uint64) uint64 {
	return uint64(min(held, 1<<31-1))<<32 | tie>>32
}

// rankThreshold prefers the least loaded of the workers holding the longest
// match, when that match covers enough of the prompt and the worker is not
// overloaded relative to the pool; otherwise the least loaded worker.
func (c *cacheAware) rankThreshold(p *pick) {
	best, sum := 0, 0.0
	for _, cd := range p.cands {
		best = max(best, cd.matched)
		sum += cd.load
	}
	mean := sum / float64(len(p.cands))
	if best > 0 && float64(best) >= c.cfg.MatchThreshold*float64(p.blocks) {
		// Longest match first, then least loaded: the lexicographic order
		// folded into one number, load staying far below the step.
		primary := 0
		for i := range p.cands {
			cd := &p.cands[i]
			cd.cost = float64(best-cd.matched)*1e9 + cd.load
			if less(cd, &p.cands[primary]) {
				primary = i
			}
		}
		if !c.overloaded(p.cands[primary].load, mean) {
			return
		}
	}
	for i := range p.cands {
		p.cands[i].cost = p.cands[i].load
	}
}

// overloaded is the spill gate: load above both mean × rel and mean + abs.
func (c *cacheAware) overloaded(load, mean float64) bool {
	return load > mean*c.cfg.BalanceRel && load > mean+c.cfg.BalanceAbs
}

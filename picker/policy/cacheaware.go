package policy

// cacheAware sends a request where its prompt is cached, unless the load
// there outweighs the cache. See ModeCost and ModeThreshold.
type cacheAware struct {
	indexed
	cfg CacheAwareConfig
}

func (c *cacheAware) rank(_ *engine, p *pick) {
	c.match(p)
	if c.cfg.Mode == ModeThreshold {
		c.rankThreshold(p)
		return
	}
	// Cost: the work queued ahead plus the prefill this request brings,
	// counting only the blocks the worker does not hold.
	for i := range p.cands {
		cd := &p.cands[i]
		cd.cost = cd.load + float64(p.blocks-cd.matched)/c.cfg.BlocksPerLoad
	}
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

package policy

// weightedScorer is the upstream endpoint picker's default: a weighted sum
// of a queue score, a KV-cache score and a prefix score, the highest total
// winning. The engine's part is to clamp each score to [0,1].
type weightedScorer struct {
	indexed
	cfg  WeightedScorerConfig
	lora *loraAffinity
}

func (s *weightedScorer) rank(_ *engine, p *pick) {
	s.match(p)
	maxWaiting := 0
	for _, cd := range p.cands {
		if cd.metrics != nil {
			maxWaiting = max(maxWaiting, cd.metrics.Waiting)
		}
	}
	for i := range p.cands {
		cd := &p.cands[i]
		queue, kv, pfx := 1.0, 1.0, 0.0
		if m := cd.metrics; m != nil {
			if maxWaiting > 0 {
				queue = 1 - float64(m.Waiting)/float64(maxWaiting)
			}
			kv = 1 - m.KVUsage
		}
		if p.blocks > 0 {
			pfx = float64(cd.matched) / float64(p.blocks)
		}
		cd.cost = -(s.cfg.QueueWeight*clamp01(queue) + s.cfg.KVWeight*clamp01(kv) + s.cfg.PrefixWeight*clamp01(pfx))
		if s.cfg.LoRAWeight > 0 {
			cd.cost -= s.cfg.LoRAWeight * clamp01(s.lora.score(p, cd))
		}
	}
}

// clamp01 bounds a score to [0,1]; NaN counts as 0.
func clamp01(x float64) float64 {
	if !(x > 0) {
		return 0
	}
	return min(x, 1)
}

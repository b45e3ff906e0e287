package policy

import (
	"math"
	"sync/atomic"

	"github.com/inferpick/inferpick/picker/prefix"
)

// The home of a prompt prefix is where every picker replica sends it when
// none of them has learned better, so that replicas which share nothing
// still agree on a prefix they have not routed before.
//
// The prefix is the prompt's first HomeBlocks full blocks (with the model
// and cache salt), hashed the same way in every process. Each candidate
// worker gets the rendezvous (highest random weight) weight of that hash and
// of the worker's stable identity (pod UID and port, which every replica
// reads alike from the API server); the home is the heaviest candidate whose
// load stays within the bound of consistent hashing with bounded loads:
// after taking the request it would hold at most ⌈(1+ε) × (total+1) / n⌉ + 1
// requests, loads counted in units of one new request. (The one request of
// slack matters at low loads, where the first term rounds to one: a
// single request in flight there, or another replica's share of one seen
// in the server's figures, would otherwise push the prefix to the next
// worker, and replicas whose views differ by such fractions would not
// agree.) A worker over the
// bound overflows the prefix to the next worker in the prefix's own order.
// Adding or removing a worker moves only the prefixes whose home it becomes
// or was.
//
// The learned index refines the home: when this replica knows a candidate
// that holds the prefix, the index decides and no home is taken, so a prefix
// learned elsewhere stays there. Otherwise the home is credited with the
// prefill of the prompt it is presumed to hold, in proportion to the chance
// that another replica sent the prompt there (homeCredit), which is nil
// when prompts do not share prefixes. Whatever the index knows, replicas
// that found the home busy went on down the prefix's order, so every
// candidate pays for its place in that order (orderCost): the same share of
// the prompt's prefill, times its place as a fraction of the order. Pods
// whose costs are close are thus chosen in the prefix's order by every
// replica alike, so that a conversation's turns meet on one pod whichever
// replica routes them; exact ties are broken in that order too.

// home returns the index in p.cands of the prompt's home, or -1 when there
// is none: home hashing is off, the prompt is shorter than a block, the
// index already knows a holder of the prefix, or every candidate is over the
// bound. Whenever the prompt has a key, the
// candidates' tie-break follows the prefix's rendezvous order (p.ordered),
// so that replicas whose costs tie (idle workers, a spill off a busy
// holder) still choose alike.
func (c *cacheAware) home(e *engine, p *pick) int {
	if c.cfg.HomeBlocks <= 0 || len(p.cands) < 2 {
		return -1
	}
	key, blocks := c.homeKey(p)
	if blocks == 0 {
		return -1
	}
	learned, total := false, 0.0
	for i := range p.cands {
		cd := &p.cands[i]
		cd.tie = ^prefix.Rendezvous(key, cd.w.StableKey()) // the heaviest first
		learned = learned || cd.matched >= blocks
		total += cd.load
	}
	p.ordered = true
	c.reuse.observe(learned)
	if learned {
		return -1
	}
	unit := max(e.cfg.PrefillWeight, 1) // what the new request adds
	bound := math.Ceil((1+c.cfg.HomeEpsilon)*(total/unit+1)/float64(len(p.cands))) + homeSlack
	best := -1
	for i := range p.cands {
		cd := &p.cands[i]
		if cd.load/unit+1 <= bound && (best < 0 || cd.tie < p.cands[best].tie) {
			best = i
		}
	}
	return best
}

// homeCredit is the cost taken off candidate i for being the prompt's home:
// the prefill of the blocks it is presumed to hold beyond those the index
// knows, times the chance that another replica sent the prompt there
// (othersShare). A lone picker gives no credit: the home then only breaks
// ties.
func (c *cacheAware) homeCredit(p *pick, i, home int) float64 {
	if i != home {
		return 0
	}
	return c.othersShare(p) * float64(p.blocks-p.cands[i].matched) / c.cfg.BlocksPerLoad
}

// orderCost is what candidate i pays for its place in the prefix's
// rendezvous order: the share of the prompt's prefill another replica may
// have placed there times its place, from 0 for the heaviest to about 1 for
// the lightest (its tie key as a fraction of the key space, which for
// uniformly spread weights is its expected rank over the candidates). Nil
// unless the candidates are in the prefix's order.
func (c *cacheAware) orderCost(p *pick, i int) float64 {
	if !p.ordered {
		return 0
	}
	return c.othersShare(p) * float64(p.blocks) / c.cfg.BlocksPerLoad * (float64(p.cands[i].tie) / (1 << 64))
}

// othersShare is the chance that another replica sent a prompt there: the
// share of prompts whose prefix recurs (reuse: none when prompts share
// nothing) times the share of them the others routed, r/(1+r) with r
// others' requests per own (about N-1 of N replicas). It is 0 for a lone
// picker.
func (c *cacheAware) othersShare(p *pick) float64 {
	if p.others <= 0 {
		return 0
	}
	return c.reuse.rate() * p.others / (1 + p.others)
}

// homeSlack is the requests a home may hold beyond the (1+ε) bound.
const homeSlack = 1

// reusePrior is the reuse rate before the first pick: prompts are presumed
// to recur until the traffic shows otherwise (within about 16 prompts), so
// that the first prefixes replicas route, all of them new to each, go to
// their home rather than to whichever pod each replica sees least loaded.
const reusePrior = 1.0

// recent is an exponentially weighted average over about the last 16
// observations, lock-free: the share of recent prompts whose prefix (the
// home key's blocks) this replica's index already held (reuse), or how
// many requests others had in flight per own, capped at one (peers).
type recent struct{ bits atomic.Uint64 }

const recentWeight = 1.0 / 16

func (r *recent) rate() float64 { return math.Float64frombits(r.bits.Load()) }

func (r *recent) set(v float64) { r.bits.Store(math.Float64bits(v)) }

func (r *recent) observe(seen bool) {
	x := 0.0
	if seen {
		x = 1
	}
	r.add(x)
}

func (r *recent) add(x float64) {
	for {
		old := r.bits.Load()
		v := math.Float64frombits(old)
		if r.bits.CompareAndSwap(old, math.Float64bits(v+recentWeight*(x-v))) {
			return
		}
	}
}

// homeKey is the prompt's home key and the blocks it covers (0 for a prompt
// shorter than a block), hashed once per pick.
func (c *cacheAware) homeKey(p *pick) (uint64, int) {
	if !p.keyed {
		p.keyed = true
		p.key, p.keyBlocks = prefix.StableHash(p.req.Model, p.req.CacheSalt, p.req.Prompt, c.cfg.HomeBlocks)
	}
	return p.key, p.keyBlocks
}

package policy

import (
	"errors"
	"fmt"
	"math/rand/v2"

	utilclock "k8s.io/utils/clock"

	"github.com/inferpick/inferpick/picker/registry"
)

// Option configures Build.
type Option func(*options)

type options struct {
	clock   utilclock.PassiveClock
	rand    *rand.Rand
	matched func(matched, total int)
	workers func() []*registry.Worker // the whole pool, when Build has a registry
}

// WithMatchObserver is told, for each pick of a policy that keeps a prefix
// index, how many of the prompt's blocks the best-matching worker holds and
// how many the prompt has.
func WithMatchObserver(f func(matched, total int)) Option {
	return func(o *options) { o.matched = f }
}

// WithClock sets the clock metric freshness is judged by.
func WithClock(c utilclock.PassiveClock) Option { return func(o *options) { o.clock = c } }

// WithRand sets the random source behind tie-breaks and random choices;
// seed it for reproducible picks. The policy serializes its use.
func WithRand(r *rand.Rand) Option { return func(o *options) { o.rand = r } }

// Build returns the policy cfg names, defaulted and validated. Policies that
// keep a prefix index (cache-aware, weighted-scorer) follow reg's workers,
// so reg is required for them.
func Build(cfg Config, reg *registry.Registry, opts ...Option) (Policy, error) {
	cfg = cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("policy config: %w", err)
	}
	o := options{clock: utilclock.RealClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.rand == nil {
		o.rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if reg != nil {
		o.workers = reg.Workers
	}
	var r ranker
	switch cfg.Name {
	case CacheAware, WeightedScorer:
		if reg == nil {
			return nil, fmt.Errorf("policy %s: %w", cfg.Name, errNoRegistry)
		}
		if cfg.Name == CacheAware {
			ca := &cacheAware{indexed: newIndexed(cfg.Index, reg, o.matched), cfg: cfg.CacheAware, lora: newLoRAAffinity(reg)}
			ca.reuse.set(reusePrior)
			if cfg.CacheAware.Replicas != 1 {
				ca.peers.set(1)
			}
			r = ca
		} else {
			ws := &weightedScorer{indexed: newIndexed(cfg.Index, reg, o.matched), cfg: cfg.WeightedScorer, lora: newLoRAAffinity(reg)}
			if cfg.WeightedScorer.NoHitLRUWeight > 0 {
				ws.noHit = newNoHitStamps(reg)
			}
			r = ws
		}
	case LeastLoad:
		r = leastLoad{}
	case RoundRobin:
		r = &roundRobin{}
	case Random:
		r = random{}
	case PowerOfTwo:
		r = powerOfTwo{}
	}
	e := newEngine(cfg, o, r)
	if cfg.SLO != nil {
		e.slo = newPredictor(*cfg.SLO)
	}
	return e, nil
}

var errNoRegistry = errors.New("a registry is required")

// Observe implements Observer: policies with a prefix index record that
// served holds the prompt; others ignore it.
func (e *engine) Observe(req *Request, served *registry.Worker) {
	if o, ok := e.ranker.(Observer); ok {
		o.Observe(req, served)
	}
}

var _ Policy = (*engine)(nil)

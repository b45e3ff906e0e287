package scrape

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferpick/inferpick/picker/registry"
)

// Scraper polls the /metrics page of every worker in a registry and stores
// the result on the worker. Register it with Registry.AddListener and run
// it with Start (it is a controller-runtime Runnable). Each worker has its
// own poller goroutine, started when the worker is added (or when Start
// runs, for workers added before) and ended when it is removed or Start's
// context ends; Start's one ticker tells them all when a scrape is due. The
// listener methods never wait for the network.
type Scraper struct {
	opts      options
	client    *http.Client
	ownClient bool
	header    http.Header // shared by all requests, never modified
	duration  prometheus.Histogram
	collector *collector

	mu      sync.Mutex // guards the fields below
	state   runState
	runCtx  context.Context
	pollers map[*registry.Worker]*poller
	running sync.WaitGroup // launched pollers
}

type runState uint8

const (
	idle runState = iota
	running
	stopped
)

var _ registry.Listener = (*Scraper)(nil)

// New returns a Scraper. Its own metrics are registered on reg when reg is
// not nil: inferpick_scrape_errors_total{address,reason},
// inferpick_scrape_malformed_lines_total{address},
// inferpick_scrape_staleness_seconds{address} (series of a worker vanish
// when it leaves) and inferpick_scrape_duration_seconds.
func New(reg prometheus.Registerer, opts ...Option) (*Scraper, error) {
	o := options{interval: DefaultInterval, modelsInterval: DefaultModelsInterval, path: DefaultPath, maxBody: DefaultMaxBodySize}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.complete(); err != nil {
		return nil, fmt.Errorf("scrape options: %w", err)
	}
	s := &Scraper{
		opts:    o,
		client:  o.client,
		header:  http.Header{"Accept": {"text/plain;version=0.0.4;q=1,*/*;q=0.1"}},
		pollers: map[*registry.Worker]*poller{},
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "inferpick",
			Subsystem: "scrape",
			Name:      "duration_seconds",
			Help:      "Time taken by one scrape of a model server's metrics page, successful or not.",
			Buckets:   []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
	}
	if s.client == nil {
		s.client, s.ownClient = newClient(o.interval), true
	}
	s.collector = newCollector(s)
	if reg != nil {
		for _, c := range []prometheus.Collector{s.duration, s.collector} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register scrape metrics: %w", err)
			}
		}
	}
	return s, nil
}

// WorkerAdded starts polling w (at once if the Scraper runs, else when it
// starts). It does not wait for anything.
func (s *Scraper) WorkerAdded(w *registry.Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stopped {
		return
	}
	if _, ok := s.pollers[w]; ok {
		return
	}
	p := newPoller(s, w)
	s.pollers[w] = p
	if s.state == running {
		s.launchLocked(s.runCtx, p)
	}
}

// WorkerRemoved stops polling w and forgets its metric series. The poller
// ends in the background; an in-flight request is cancelled.
func (s *Scraper) WorkerRemoved(w *registry.Worker) {
	s.mu.Lock()
	p := s.pollers[w]
	delete(s.pollers, w)
	s.mu.Unlock()
	if p != nil {
		p.stop()
	}
}

// Start runs the pollers until ctx ends, then stops them all and waits for
// them. A Scraper runs once.
func (s *Scraper) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.state != idle {
		s.mu.Unlock()
		return errors.New("scraper already started")
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.state, s.runCtx = running, runCtx
	for _, p := range s.pollers {
		s.launchLocked(runCtx, p)
	}
	s.mu.Unlock()

	s.tick(ctx)

	s.mu.Lock()
	s.state = stopped
	for w, p := range s.pollers {
		delete(s.pollers, w)
		p.stop()
	}
	s.mu.Unlock()
	s.running.Wait()
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
	return nil
}

// tick starts a scrape of every worker each interval until ctx ends. One
// timer serves them all, so the workers are scraped together: their
// answers arrive in a burst that the network poller collects in a few
// wake-ups, rather than one wake-up of the process per worker. A worker
// still busy with its last scrape (a slow server) keeps one tick pending,
// as a time.Ticker would, and holds up no other.
func (s *Scraper) tick(ctx context.Context) {
	t := time.NewTicker(s.opts.interval)
	defer t.Stop()
	for {
		s.mu.Lock()
		for _, p := range s.pollers {
			p.kick()
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// NeedLeaderElection reports false: every replica routes, so every replica
// scrapes.
func (s *Scraper) NeedLeaderElection() bool { return false }

// launchLocked starts p's goroutine under a child of runCtx, the context of
// the running Scraper. s.mu is held.
func (s *Scraper) launchLocked(runCtx context.Context, p *poller) {
	ctx, cancel := context.WithCancel(runCtx)
	p.cancel = cancel
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		p.run(ctx)
	}()
}

// Status is what the Scraper last learned about one worker.
type Status struct {
	// Report is the last good scrape's content.
	Report Report
	// Scraped is when it was taken; zero before the first good scrape.
	Scraped time.Time
	// Err is the last scrape's error, nil when it succeeded.
	Err error
}

// Status returns the worker's scrape status, or false when the Scraper does
// not poll it.
func (s *Scraper) Status(w *registry.Worker) (Status, bool) {
	s.mu.Lock()
	p := s.pollers[w]
	s.mu.Unlock()
	if p == nil {
		return Status{}, false
	}
	if st := p.status.Load(); st != nil {
		return *st, true
	}
	return Status{}, true
}

// livePollers returns the pollers, at most one per address (the newest
// worker's), so that exported series never collide.
func (s *Scraper) livePollers() []*poller {
	s.mu.Lock()
	defer s.mu.Unlock()
	byAddr := make(map[string]*poller, len(s.pollers))
	for _, p := range s.pollers {
		if q, ok := byAddr[p.w.Address()]; !ok || q.w.ID() < p.w.ID() {
			byAddr[p.w.Address()] = p
		}
	}
	out := make([]*poller, 0, len(byAddr))
	for _, p := range byAddr {
		out = append(out, p)
	}
	return out
}

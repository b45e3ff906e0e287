package kvindex

import (
	"context"
	"encoding/binary"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/inferpick/inferpick/picker/kvevents"
	"github.com/inferpick/inferpick/picker/registry"
)

// Subscriber keeps one KV-event subscription to every worker in the
// registry, on the worker's IP at Port plus the worker's data-parallel rank
// (vLLM offsets each rank's endpoint port by its rank), and applies the
// events to Index. A worker whose server names the engines behind its port
// (Metrics.Engines: vLLM's internal, hybrid or external load balancer) is
// followed engine by engine instead, engine e on Port plus e. An engine's
// blocks are forgotten whenever its events may have been missed: before
// each (re)connection, after a gap in its sequence numbers or an
// undecodable batch, and when the worker leaves the registry.
type Subscriber struct {
	Index *Index
	// Port is where engine 0 of a deployment publishes its events (vLLM's
	// --kv-events-config endpoint, tcp://*:5557 by default); engine r
	// publishes on Port plus r.
	Port int
	// Topic is the prefix of the topics to subscribe to; empty for all.
	Topic string
	// Backoff bounds the wait between failed connections: from Backoff/50
	// doubling up to Backoff. Zero means 5 s.
	Backoff time.Duration
	// EngineCheck is how often a worker's reported engines are read to
	// follow those it names. Zero means 2 s.
	EngineCheck time.Duration
	Log         logr.Logger

	connected atomic.Int64

	mu      sync.Mutex
	ctx     context.Context // set by Start; nil before
	follows map[uint32]context.CancelFunc
	pending []*registry.Worker // added before Start
	wg      sync.WaitGroup
}

var _ registry.Listener = (*Subscriber)(nil)

// Start follows the workers until ctx ends, then stops every subscription
// and returns once they have ended.
func (s *Subscriber) Start(ctx context.Context) error {
	s.mu.Lock()
	s.ctx = ctx
	if s.follows == nil {
		s.follows = map[uint32]context.CancelFunc{}
	}
	for _, w := range s.pending {
		s.followLocked(ctx, w)
	}
	s.pending = nil
	s.mu.Unlock()
	<-ctx.Done()
	s.wg.Wait()
	return nil
}

// Connected returns how many workers' events are subscribed to now.
func (s *Subscriber) Connected() int { return int(s.connected.Load()) }

// WorkerAdded starts following the worker.
func (s *Subscriber) WorkerAdded(w *registry.Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == nil {
		s.pending = append(s.pending, w)
		return
	}
	s.followLocked(s.ctx, w)

}

// WorkerRemoved stops following the worker and forgets its blocks.
func (s *Subscriber) WorkerRemoved(w *registry.Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.pending {
		if p == w {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			break
		}
	}
	if cancel, ok := s.follows[w.ID()]; ok {
		cancel()
		delete(s.follows, w.ID())
	}
	s.Index.Remove(w.ID())
}

// followLocked starts following w under ctx, the context of Start.
func (s *Subscriber) followLocked(ctx context.Context, w *registry.Worker) {
	if ctx.Err() != nil {
		return
	}
	if _, ok := s.follows[w.ID()]; ok {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	s.follows[w.ID()] = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.engines(ctx, w)
	}()
}

// start follows engine e of w on port until ctx ends, and returns a
// channel closed once the engine's blocks are forgotten after that.
func (s *Subscriber) start(ctx context.Context, w *registry.Worker, e, port int) <-chan struct{} {
	host, _, err := net.SplitHostPort(w.Address())
	if err != nil {
		host = w.Address()
	}
	done := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		s.follow(ctx, w.ID(), e, net.JoinHostPort(host, strconv.Itoa(port)))
	}()
	return done
}

// engines follows the engines behind w's port until ctx ends, the engine
// of rank r on Port plus r (wanted), and stops and forgets those the server
// stops naming.
func (s *Subscriber) engines(ctx context.Context, w *registry.Worker) {
	every := s.EngineCheck
	if every <= 0 {
		every = 2 * time.Second
	}
	// stops[e] ends engine e's subscription and returns once its blocks are
	// forgotten, so that a later one of the same engine starts afresh.
	var (
		stops    [MaxEngines]func()
		followed registry.Engines
		past     bool // an engine's port past the last was logged
	)
	reach := reachable(s.Port)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		want := wanted(w.Endpoint().Rank, w.Metrics())
		if want&^reach != 0 && !past {
			s.Log.Error(nil, "Not following some of a server's engines: their ports are past the last", "worker", w.Address(), "engines", (want &^ reach).List())
			past = true
		}
		want &= reach
		for _, e := range (followed &^ want).List() {
			stops[e]()
			stops[e] = nil
		}
		for _, e := range (want &^ followed).List() {
			ectx, cancel := context.WithCancel(ctx)
			done := s.start(ectx, w, e, s.Port+e)
			stops[e] = func() { cancel(); <-done }
		}
		followed = want
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reachable returns the engines whose events port, port plus the engine's
// rank, is a TCP port.
func reachable(port int) registry.Engines {
	last := math.MaxUint16 - port // the highest rank with a port
	switch {
	case last >= MaxEngines-1:
		return ^registry.Engines(0)
	case last < 0:
		return 0
	}
	return 1<<(last+1) - 1
}

// wanted returns the engines to follow behind the port of the given rank
// (its place in the pool's target ports) whose server reported m (nil
// before the first scrape): the port's rank until the server's metrics name
// its engines, then those they name. vLLM labels each engine with its rank
// over the whole deployment: 0 … N−1 behind one port with its internal load
// balancer, a node's ranks from its start rank on with its hybrid one, a
// port's one rank with its external one (which on a node after the first is
// not the port's place in the pool). A server at a later port that names
// engine 0 alone is taken for one that is no rank of a deployment, and
// followed at its port's rank.
func wanted(rank int, m *registry.Metrics) registry.Engines {
	if m != nil && m.Engines != 0 && (rank == 0 || m.Engines != 1) {
		return m.Engines
	}
	if rank < 0 || rank >= MaxEngines {
		return 0
	}
	return 1 << rank
}

// follow subscribes to the events of engine e of a worker until ctx ends,
// reconnecting with a growing wait after each failure.
func (s *Subscriber) follow(ctx context.Context, id uint32, e int, addr string) {
	defer s.Index.RemoveEngine(id, e) // after the last Apply
	limit := s.Backoff
	if limit <= 0 {
		limit = 5 * time.Second
	}
	wait := limit / 50
	log := s.Log.WithValues("worker", addr)
	if e > 0 {
		log = log.WithValues("engine", e)
	}
	for ctx.Err() == nil {
		sub, err := kvevents.DialSub(ctx, addr, []byte(s.Topic))
		if err == nil {
			wait = limit / 50
			s.Index.ClearEngine(id, e)
			stop := context.AfterFunc(ctx, func() { _ = sub.Close() })
			s.connected.Add(1)
			err = s.read(id, e, sub, log)
			s.connected.Add(-1)
			stop()
			_ = sub.Close()
			s.Index.ClearEngine(id, e)
		}
		if ctx.Err() != nil {
			return
		}
		log.V(2).Info("KV events interrupted", "err", err, "retryIn", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, limit)
	}
}

// read applies the subscription's batches to engine e of worker id until
// it fails.
func (s *Subscriber) read(id uint32, e int, sub *kvevents.Sub, log logr.Logger) error {
	var (
		parts [][]byte
		batch kvevents.Batch
		next  uint64
		begun bool
	)
	for {
		var err error
		parts, err = sub.Recv(parts)
		if err != nil {
			return err
		}
		if len(parts) != 3 || len(parts[1]) != 8 {
			log.V(2).Info("KV event message ignored: not topic, sequence and payload", "parts", len(parts))
			continue
		}
		seq := binary.BigEndian.Uint64(parts[1])
		if begun && seq != next {
			log.V(2).Info("KV events missed; forgetting the worker's blocks", "expected", next, "got", seq)
			s.Index.ClearEngine(id, e)
		}
		begun, next = true, seq+1
		if err := kvevents.DecodeBatch(parts[2], &batch); err != nil {
			log.V(2).Info("KV event batch undecodable; forgetting the worker's blocks", "err", err)
			s.Index.ClearEngine(id, e)
			continue
		}
		s.Index.ApplyEngine(id, e, batch.Events)
	}
}

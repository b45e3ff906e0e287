package kvindex

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
// undecodable batch, and when the worker leaves the registry; with a
// replay port, those its server still keeps are read again on each
// (re)connection and after a gap.
//
// With Listen, the Subscriber also takes the events of servers that
// connect to it (their endpoint names the picker), each under the topic
// kv@<pod IP>[:port]@<model>: a batch goes to the worker on that IP (and
// port) that follows the batch's data-parallel rank. An engine's blocks
// are forgotten when a connection starts feeding it, after a gap in that
// connection's sequence numbers or an undecodable batch (there is no
// replay), and when the connection ends; an engine is fed by the
// connection that last started feeding it, the batches of an earlier one
// dropped.
type Subscriber struct {
	Index *Index
	// Port is where engine 0 of a deployment publishes its events (vLLM's
	// --kv-events-config endpoint, tcp://*:5557 by default); engine r
	// publishes on Port plus r. Zero dials no server.
	Port int
	// Listen, when not empty, is the address ("host:port") where servers
	// that connect to the picker publish their events.
	Listen string
	// Topic is the prefix of the topics to subscribe to; empty for all.
	Topic string
	// ReplayPort, when not 0, is where engine 0 serves its kept batches
	// again (vLLM's --kv-events-config replay_endpoint); engine r serves
	// them on ReplayPort plus r. A subscription then starts from the
	// batches the engine still keeps, and a gap in the sequence numbers is
	// filled from them, instead of the engine's blocks being forgotten.
	ReplayPort int
	// ReplayTimeout bounds one replay. Zero means DefaultReplayTimeout.
	ReplayTimeout time.Duration
	// ReplaySlots bounds the replays read at once, so that a replica
	// starting beside many pods leaves cores to routing. Zero means half
	// of GOMAXPROCS, at least one.
	ReplaySlots int
	// Backoff bounds the wait between failed connections: from Backoff/50
	// doubling up to Backoff. Zero means 5 s.
	Backoff time.Duration
	// DialTimeout bounds a connection and its handshake, so that a server
	// that accepts and then says nothing (a frozen process, a proxy whose
	// backend is gone) is dialled again. Zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// EngineCheck is how often a worker's reported engines are read to
	// follow those it names. Zero means 2 s.
	EngineCheck time.Duration
	Log         logr.Logger

	connected    atomic.Int64
	gaps         atomic.Int64
	strayBatches atomic.Int64 // connected publishers' batches no worker took
	listened
	replays   [replayResults]atomic.Int64
	slotsOnce sync.Once
	slots     chan struct{} // a replay holds one

	mu      sync.Mutex
	ctx     context.Context // set by Start; nil before
	follows map[uint32]context.CancelFunc
	pending []*registry.Worker // added before Start
	wg      sync.WaitGroup
}

var _ registry.Listener = (*Subscriber)(nil)

// Start follows the workers (and listens, with Listen) until ctx ends, then
// stops every subscription and returns once they have ended. It fails when
// Listen cannot be listened on.
func (s *Subscriber) Start(ctx context.Context) error {
	if s.Listen != "" {
		timeout := s.DialTimeout
		if timeout <= 0 {
			timeout = DefaultDialTimeout
		}
		l, err := kvevents.ListenSub(s.Listen, []byte(s.Topic), s.serve,
			kvevents.WithHandshakeTimeout(timeout), kvevents.WithLog(s.Log), kvevents.WithMaxConns(kvevents.DefaultMaxConns, 2*MaxEngines))
		if err != nil {
			return fmt.Errorf("KV events: listen on %s: %w", s.Listen, err)
		}
		s.Log.Info("Taking KV events from the servers that connect", "address", l.Addr().String())
		s.ln.Store(l)
		defer func() { s.ln.Store(nil); _ = l.Close() }()
	}
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
	// A step of the index's compaction at every tick, so that it also
	// shrinks in a pool that went idle after pods left.
	t := time.NewTicker(compactEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.wg.Wait()
			return nil
		case <-t.C:
			s.Index.Compact()
		}
	}
}

// compactEvery is how often the subscriber compacts the index a step (at
// most compactMoves nodes): about 2,500 nodes a second.
const compactEvery = 50 * time.Millisecond

// DefaultDialTimeout bounds a connection and its handshake when the
// Subscriber is given no DialTimeout.
const DefaultDialTimeout = 5 * time.Second

// DefaultReplayTimeout bounds one replay when the Subscriber is given no
// bound: a server's default 10,000 kept batches are read and applied in
// well under a second (docs/policy.md).
const DefaultReplayTimeout = 2 * time.Second

// Connected returns how many engines' events are subscribed to now, and
// publishers connected to Listen.
func (s *Subscriber) Connected() int { return int(s.connected.Load()) }

// How a replay ended.
const (
	replayWhole     = iota // every batch asked for came back
	replayTruncated        // the engine no longer kept the first asked for
	replayFailed           // the replay endpoint failed or took too long
	replayResults
)

// replayResultNames are the result label's values, by result.
var replayResultNames = [replayResults]string{"whole", "truncated", "failed"}

// WorkerAdded starts following the worker.
func (s *Subscriber) WorkerAdded(w *registry.Worker) {
	if s.Listen != "" {
		s.addListened(w)
	}
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
	if s.Listen != "" {
		s.removeListened(w) // removes it from the index with no apply running
		return
	}
	s.Index.Remove(w.ID())
}

// followLocked starts following w under ctx, the context of Start.
func (s *Subscriber) followLocked(ctx context.Context, w *registry.Worker) {
	if ctx.Err() != nil || s.Port <= 0 {
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
	replay := ""
	if s.ReplayPort > 0 && s.ReplayPort+e <= math.MaxUint16 {
		replay = net.JoinHostPort(host, strconv.Itoa(s.ReplayPort+e))
	}
	done := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		s.follow(ctx, w.ID(), e, net.JoinHostPort(host, strconv.Itoa(port)), replay)
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
// reconnecting with a growing wait after each failure; replay is the
// engine's replay endpoint (empty: none).
func (s *Subscriber) follow(ctx context.Context, id uint32, e int, addr, replay string) {
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
	dialTimeout := s.DialTimeout
	if dialTimeout <= 0 {
		dialTimeout = DefaultDialTimeout
	}
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		sub, err := kvevents.DialSub(dctx, addr, []byte(s.Topic))
		cancel()
		if err == nil {
			wait = limit / 50
			s.Index.ClearEngine(id, e)
			stop := context.AfterFunc(ctx, func() { _ = sub.Close() })
			s.connected.Add(1)
			st := &stream{s: s, id: id, e: e, replay: replay, log: log}
			st.catchUp(ctx)
			err = st.read(ctx, sub)
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

// stream is one subscription to an engine's events: what was applied of
// them, and where to ask for those missed.
type stream struct {
	s      *Subscriber
	id     uint32
	e      int
	replay string
	log    logr.Logger
	batch  kvevents.Batch
	begun  bool   // a batch was applied
	next   uint64 // the sequence number after the last applied, once begun
}

// read applies the subscription's batches until it fails.
func (st *stream) read(ctx context.Context, sub *kvevents.Sub) error {
	var parts [][]byte
	for {
		var err error
		parts, err = sub.Recv(parts)
		if err != nil {
			return err
		}
		if len(parts) != 3 || len(parts[1]) != 8 {
			st.log.V(2).Info("KV event message ignored: not topic, sequence and payload", "parts", len(parts))
			continue
		}
		seq := binary.BigEndian.Uint64(parts[1])
		if st.begun && seq > st.next {
			st.s.gaps.Add(1)
			st.log.V(2).Info("KV events missed", "expected", st.next, "got", seq, "replay", st.replay != "")
			st.catchUp(ctx)
			if seq > st.next { // not every missed batch came back
				st.s.Index.ClearEngine(st.id, st.e)
			}
		}
		if st.begun && seq < st.next {
			continue // applied from a replay
		}
		st.apply(seq, parts[2])
	}
}

// apply applies the batch of sequence number seq, forgetting the engine's
// blocks instead when it does not decode.
func (st *stream) apply(seq uint64, payload []byte) {
	if err := kvevents.DecodeBatch(payload, &st.batch); err != nil {
		st.log.V(2).Info("KV event batch undecodable; forgetting the worker's blocks", "err", err)
		st.s.Index.ClearEngine(st.id, st.e)
	} else {
		st.s.Index.ApplyEngine(st.id, st.e, st.batch.Events)
	}
	if retained(&st.batch, maxKeptBatch) > maxKeptBatch { // an outsized batch's slices are not kept for the next
		st.batch = kvevents.Batch{}
	}
	st.begun, st.next = true, seq+1
}

// maxKeptBatch is the most bytes the decoded batch a stream reuses may keep
// room for: a step's events of a long prompt, far from what one outsized
// batch could make it hold.
const maxKeptBatch = 2 << 20

// retained is the bytes b keeps room for: its list of events, and their
// hashes, token ids and extra keys. It stops counting once past most.
func retained(b *kvevents.Batch, most int) int {
	events := b.Events[:cap(b.Events)] // a slot past the last event keeps the slices it had
	n := len(events) * int(unsafe.Sizeof(kvevents.Event{}))
	for i := 0; i < len(events) && n <= most; i++ {
		ev := &events[i]
		extra := ev.Extra[:cap(ev.Extra)]
		n += 8*cap(ev.Hashes) + 4*cap(ev.TokenIDs) + len(extra)*int(unsafe.Sizeof(kvevents.ExtraKeys{}))
		for j := 0; j < len(extra) && n <= most; j++ {
			n += cap(extra[j].Raw)
		}
	}
	return n
}

// replaySlots returns the channel whose places the replays take.
func (s *Subscriber) replaySlots() chan struct{} {
	s.slotsOnce.Do(func() {
		n := s.ReplaySlots
		if n <= 0 {
			n = max(runtime.GOMAXPROCS(0)/2, 1)
		}
		s.slots = make(chan struct{}, n)
	})
	return s.slots
}

// catchUp applies the batches the engine still keeps that this stream has
// not: from the one after the last applied on, or every kept one before
// the first. When the engine no longer keeps the first of those asked for,
// or the replay fails, batches were lost, and the engine's blocks are
// forgotten before (or after) what did come back is applied.
func (st *stream) catchUp(ctx context.Context) {
	if st.replay == "" {
		return
	}
	slots := st.s.replaySlots()
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	case <-ctx.Done():
		return
	}
	timeout := st.s.ReplayTimeout
	if timeout <= 0 {
		timeout = DefaultReplayTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	from, begun, first, result := st.next, st.begun, true, replayWhole
	err := kvevents.Replay(rctx, st.replay, from, func(seq uint64, payload []byte) error {
		if first && begun && seq != from {
			result = replayTruncated
			st.s.Index.ClearEngine(st.id, st.e)
		}
		first = false
		if !st.begun || seq >= st.next {
			st.apply(seq, payload)
		}
		return nil
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return // the stream ended (the worker left, or the picker stops): not the replay's failure
	case err != nil:
		result = replayFailed
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("replay took longer than %v (--kv-events-replay-timeout): %w", timeout, err)
		}
		st.log.Info("KV events not replayed; forgetting the worker's blocks until its events tell them again", "endpoint", st.replay, "err", err)
		st.s.Index.ClearEngine(st.id, st.e)
	case first && begun: // nothing came back, not even the batch after the gap
		result = replayTruncated
		st.s.Index.ClearEngine(st.id, st.e)
	}
	st.s.replays[result].Add(1)
}

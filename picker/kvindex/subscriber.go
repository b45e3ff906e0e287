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
// events to Index. A worker's blocks are forgotten whenever its events may
// have been missed: before each (re)connection, after a gap in its sequence
// numbers or an undecodable batch, and when it leaves the registry.
type Subscriber struct {
	Index *Index
	// Port is where every worker of rank 0 publishes its events (vLLM's
	// --kv-events-config endpoint, tcp://*:5557 by default).
	Port int
	// Topic is the prefix of the topics to subscribe to; empty for all.
	Topic string
	// Backoff bounds the wait between failed connections: from Backoff/50
	// doubling up to Backoff. Zero means 5 s.
	Backoff time.Duration
	Log     logr.Logger

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
	port := s.Port + w.Endpoint().Rank
	if port > math.MaxUint16 {
		s.Log.Error(nil, "Not following a worker's KV events: its rank's port is past the last", "worker", w.Address(), "port", port)
		return
	}
	host, _, err := net.SplitHostPort(w.Address())
	if err != nil {
		host = w.Address()
	}
	ctx, cancel := context.WithCancel(ctx)
	s.follows[w.ID()] = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.follow(ctx, w.ID(), net.JoinHostPort(host, strconv.Itoa(port)))
	}()
}

// follow subscribes to one worker's events until ctx ends, reconnecting
// with a growing wait after each failure.
func (s *Subscriber) follow(ctx context.Context, id uint32, addr string) {
	defer s.Index.Remove(id) // after the last Apply
	limit := s.Backoff
	if limit <= 0 {
		limit = 5 * time.Second
	}
	wait := limit / 50
	log := s.Log.WithValues("worker", addr)
	for ctx.Err() == nil {
		sub, err := kvevents.DialSub(ctx, addr, []byte(s.Topic))
		if err == nil {
			wait = limit / 50
			s.Index.Clear(id)
			stop := context.AfterFunc(ctx, func() { _ = sub.Close() })
			s.connected.Add(1)
			err = s.read(id, sub, log)
			s.connected.Add(-1)
			stop()
			_ = sub.Close()
			s.Index.Clear(id)
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

// read applies the subscription's batches until it fails.
func (s *Subscriber) read(id uint32, sub *kvevents.Sub, log logr.Logger) error {
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
			s.Index.Clear(id)
		}
		begun, next = true, seq+1
		if err := kvevents.DecodeBatch(parts[2], &batch); err != nil {
			log.V(2).Info("KV event batch undecodable; forgetting the worker's blocks", "err", err)
			s.Index.Clear(id)
			continue
		}
		s.Index.Apply(id, batch.Events)
	}
}

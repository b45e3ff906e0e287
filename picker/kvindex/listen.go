package kvindex

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/inferpick/inferpick/picker/kvevents"
	"github.com/inferpick/inferpick/picker/registry"
)

// The listening side of a Subscriber: servers whose --kv-events-config
// endpoint names the picker's address connect to Subscriber.Listen and
// publish there, each under a topic naming its pod (kv@<pod>@<model>).

// engineKey is one engine of one worker.
type engineKey struct {
	id uint32
	e  int
}

// podID is the pod a topic names: its IP, and the port of one of its
// servers when given (0 when not).
type podID struct {
	addr netip.Addr
	port uint16
}

// parseTopic reads the pod of a topic kv@<pod>@<model>, where <pod> is an
// IP address or IP:port (IPv6 in brackets, which may also stand without a
// port) and <model> may hold '@'; ok is false for any other topic.
func parseTopic(topic string) (pod podID, ok bool) {
	parts := strings.SplitN(topic, "@", 3)
	if len(parts) != 3 {
		return podID{}, false
	}
	id := parts[1]
	if len(id) > 2 && id[0] == '[' && id[len(id)-1] == ']' {
		if a, err := netip.ParseAddr(id[1 : len(id)-1]); err == nil && a.Is6() && a.Zone() == "" {
			return podID{addr: a.Unmap()}, true
		}
		return podID{}, false
	}
	if a, err := netip.ParseAddr(id); err == nil && a.Zone() == "" {
		return podID{addr: a.Unmap()}, true
	}
	ap, err := netip.ParseAddrPort(id)
	if err != nil || ap.Addr().Zone() != "" || ap.Port() == 0 {
		return podID{}, false
	}
	return podID{addr: ap.Addr().Unmap(), port: ap.Port()}, true
}

// listened is what the listening side keeps; lmu makes resolving a worker
// and applying to it atomic against the worker's removal.
type listened struct {
	lmu    sync.RWMutex
	byAddr map[netip.Addr][]*registry.Worker
	owners map[engineKey]*publisher // the connection that last started feeding each engine

	ln atomic.Pointer[kvevents.SubListener] // while listening

	strayMu     sync.Mutex
	strays      map[string]struct{} // topics logged as naming no worker since straysSince
	straysSince time.Time
	now         func() time.Time // the clock of straysSince; time.Now when nil
}

// ListenAddr returns the address listened on for connecting publishers;
// nil when not listening.
func (s *Subscriber) ListenAddr() net.Addr {
	if l := s.ln.Load(); l != nil {
		return l.Addr()
	}
	return nil
}

// maxStrayTopics bounds the topics remembered as logged; once that many
// are, further ones are counted but not logged until the next forgetStrays.
const maxStrayTopics = 1024

// forgetStrays is how often the topics remembered as logged are forgotten,
// so that each unmatched topic is logged again (and a new one logged once
// maxStrayTopics were) an hour on.
const forgetStrays = time.Hour

// maxTopicLen bounds a topic read (llm-d's kv@<ip:port>@<model> is far
// shorter): a longer one is taken for malformed, its batch counted as
// unmatched and only the topic's start logged.
const maxTopicLen = 512

// addListened records w as a worker connected publishers may name.
func (s *Subscriber) addListened(w *registry.Worker) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.byAddr == nil {
		s.byAddr = map[netip.Addr][]*registry.Worker{}
		s.owners = map[engineKey]*publisher{}
	}
	a := w.Endpoint().Address.Addr().Unmap()
	s.byAddr[a] = append(s.byAddr[a], w)
}

// removeListened forgets w and its blocks; no apply of a connected
// publisher's events runs meanwhile or reaches w afterwards.
func (s *Subscriber) removeListened(w *registry.Worker) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	a := w.Endpoint().Address.Addr().Unmap()
	ws := s.byAddr[a]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(s.byAddr, a)
	} else {
		s.byAddr[a] = ws
	}
	for k := range s.owners {
		if k.id == w.ID() {
			delete(s.owners, k)
		}
	}
	s.Index.Remove(w.ID())
}

// workerLocked returns the worker of pod that follows engine e: among the
// workers on the pod's IP (and port, when given), the one of rank e, or
// whose metrics name engine e (wanted); nil when none does.
func (s *Subscriber) workerLocked(pod podID, e int) *registry.Worker {
	for _, w := range s.byAddr[pod.addr] {
		ep := w.Endpoint()
		if pod.port != 0 && ep.Address.Port() != pod.port {
			continue
		}
		if wanted(ep.Rank, w.Metrics()).Has(e) {
			return w
		}
	}
	return nil
}

// publisher is one connected publisher's connection: what it fed, and
// where its sequence numbers are.
type publisher struct {
	s     *Subscriber
	log   logr.Logger
	fed   map[engineKey]bool // engines it started feeding; true once a batch was dropped for a later connection's
	batch kvevents.Batch
	begun bool
	next  uint64

	topic string // the last topic read, and its pod
	pod   podID
	podOK bool
}

// serve applies the events of one connected publisher until its
// connection ends, then forgets the blocks of the engines it fed.
func (s *Subscriber) serve(sub *kvevents.Sub) {
	s.connected.Add(1)
	defer s.connected.Add(-1)
	p := &publisher{s: s, log: s.Log.WithValues("publisher", sub.RemoteAddr().String()), fed: map[engineKey]bool{}}
	defer p.forget()
	p.log.V(2).Info("KV-event publisher connected")
	var parts [][]byte
	for {
		var err error
		if parts, err = sub.Recv(parts); err != nil {
			p.log.V(2).Info("KV-event publisher gone", "err", err)
			return
		}
		if len(parts) != 3 || len(parts[1]) != 8 {
			p.log.V(2).Info("KV event message ignored: not topic, sequence and payload", "parts", len(parts))
			continue
		}
		seq := binary.BigEndian.Uint64(parts[1])
		if p.begun && seq != p.next {
			// No replay for a connected publisher: what it held is
			// forgotten until its events tell it again.
			s.gaps.Add(1)
			p.log.V(2).Info("KV events missed; forgetting the publisher's blocks", "expected", p.next, "got", seq)
			p.forget()
		}
		p.begun, p.next = true, seq+1
		long := len(parts[0]) > maxTopicLen
		if long {
			p.topic, p.pod, p.podOK = "", podID{}, false // never kept: read afresh after
		} else if string(parts[0]) != p.topic {
			p.topic = string(parts[0])
			p.pod, p.podOK = parseTopic(p.topic)
		}
		if err := kvevents.DecodeBatch(parts[2], &p.batch); err != nil {
			p.log.V(2).Info("KV event batch undecodable; forgetting the publisher's blocks", "err", err)
			p.forget()
			continue
		}
		if long {
			p.stray(string(parts[0][:64])+"…", "the topic is longer than 512 bytes")
		} else {
			p.apply()
		}
		if retained(&p.batch, maxKeptBatch) > maxKeptBatch {
			p.batch = kvevents.Batch{}
		}
	}
}

// apply applies the decoded batch to the worker its topic and rank name.
// An engine this connection had not fed is cleared first, as at the start
// of a subscription, and taken from any connection that fed it before. A
// batch for an engine a later connection took from this one is dropped:
// the later one's blocks are the engine's until it ends.
func (p *publisher) apply() {
	s, e := p.s, p.batch.DPRank
	if !p.podOK {
		p.stray(p.topic, "the topic is not kv@<pod IP>@<model>")
		return
	}
	s.lmu.RLock()
	w := s.workerLocked(p.pod, e)
	if w != nil {
		k := engineKey{w.ID(), e}
		if _, fed := p.fed[k]; fed {
			switch s.owners[k] {
			case p:
				s.Index.ApplyEngine(k.id, e, p.batch.Events)
				s.lmu.RUnlock()
				return
			case nil: // its last feeder ended: feed it afresh
			default:
				s.lmu.RUnlock()
				p.superseded(k)
				return
			}
		}
	}
	s.lmu.RUnlock()
	if w == nil {
		p.stray(p.topic, "no worker of the pool has the topic's address and engine")
		return
	}
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if w = s.workerLocked(p.pod, e); w == nil { // removed meanwhile
		return
	}
	k := engineKey{w.ID(), e}
	switch o := s.owners[k]; {
	case o == p:
		s.Index.ApplyEngine(k.id, e, p.batch.Events)
		return
	case o != nil:
		if _, fed := p.fed[k]; fed { // taken over meanwhile
			p.superseded(k)
			return
		}
	}
	p.fed[k] = false
	s.owners[k] = p
	s.Index.ClearEngine(k.id, e)
	s.Index.ApplyEngine(k.id, e, p.batch.Events)
}

// superseded drops a batch for k, an engine a later connection took from
// this one, and logs the first.
func (p *publisher) superseded(k engineKey) {
	if p.fed[k] {
		return
	}
	p.fed[k] = true
	p.log.V(2).Info("KV events dropped: a later connection feeds the engine", "topic", p.topic, "engine", k.e)
}

// forget clears the engines this connection fed that no other connection
// has started feeding since, and those of workers that left.
func (p *publisher) forget() {
	if len(p.fed) == 0 {
		return
	}
	s := p.s
	s.lmu.Lock()
	defer s.lmu.Unlock()
	for k := range p.fed {
		if s.owners[k] == p {
			delete(s.owners, k)
			s.Index.ClearEngine(k.id, k.e)
		}
	}
	clear(p.fed)
}

// stray counts a batch no worker takes, and logs its topic (as shown) the
// first time since the remembered topics were last forgotten.
func (p *publisher) stray(topic, reason string) {
	s := p.s
	s.strayBatches.Add(1)
	s.strayMu.Lock()
	defer s.strayMu.Unlock()
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	if t := now(); s.strays == nil || t.Sub(s.straysSince) >= forgetStrays {
		s.strays, s.straysSince = map[string]struct{}{}, t
	}
	if _, ok := s.strays[topic]; ok || len(s.strays) >= maxStrayTopics {
		return
	}
	s.strays[topic] = struct{}{}
	p.log.Info("KV events dropped: their topic names no worker of the pool", "reason", reason, "topic", topic, "engine", p.batch.DPRank)
}

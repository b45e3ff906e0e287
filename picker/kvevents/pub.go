package kvevents

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// subscriberQueue is how many messages wait for one subscriber before
// further ones are dropped for it (ZeroMQ's high-water mark).
const subscriberQueue = 10_000

// maxSubscriptions bounds what one subscriber may hold subscribed at once
// (a repeated subscription counts again until cancelled, as in ZeroMQ): a
// peer asking for more is disconnected, so that no peer makes the
// publisher's memory grow without end.
const maxSubscriptions = 1024

// Pub is a ZeroMQ PUB socket, listening on TCP (ListenPub) or connected
// to a SUB socket that listens (DialPub): every message sent goes to each
// connected subscriber whose subscriptions match its first frame.
type Pub struct {
	ln   net.Listener       // nil for a connecting Pub
	done chan struct{}      // closed by Close
	stop context.CancelFunc // ends a connecting Pub's dialling
	wg   sync.WaitGroup

	mu     sync.Mutex
	subs   map[*peer]struct{}
	closed bool
}

// peer is one subscriber connection.
type peer struct {
	conn   net.Conn
	queue  chan []byte // framed messages
	mu     sync.Mutex
	topics [][]byte // subscribed prefixes
	done   chan struct{}
}

// ListenPub listens on addr ("host:port"; port 0 picks one).
func ListenPub(addr string) (*Pub, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return servePub(ln), nil
}

// servePub is ListenPub on ln.
func servePub(ln net.Listener) *Pub {
	p := &Pub{ln: ln, done: make(chan struct{}), subs: map[*peer]struct{}{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		acceptLoop(ln, p.done, clock.RealClock{}, logr.Discard(), func(conn net.Conn) bool { return p.add(conn) != nil })
	}()
	return p
}

// DialPub returns a PUB socket that connects to the SUB socket listening
// at addr ("host:port"), as ZeroMQ's connect does: it dials until a
// connection is made, and again each time it ends, every redialEvery,
// until ctx ends or Close. Messages sent while no subscriber is connected
// are dropped, as a ZeroMQ PUB drops those no subscription matches.
func DialPub(ctx context.Context, addr string) *Pub {
	ctx, stop := context.WithCancel(ctx)
	p := &Pub{stop: stop, subs: map[*peer]struct{}{}}
	p.wg.Add(1)
	go p.dial(ctx, addr)
	return p
}

// redialEvery is how long a connecting Pub waits before dialling again
// (ZeroMQ's reconnect interval).
const redialEvery = 100 * time.Millisecond

// Addr returns the address listened on; nil for a connecting Pub.
func (p *Pub) Addr() net.Addr {
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// Subscribers returns how many connected peers have subscribed to
// something.
func (p *Pub) Subscribers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for s := range p.subs {
		s.mu.Lock()
		if len(s.topics) > 0 {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// dial connects to addr until ctx ends, one connection at a time.
func (p *Pub) dial(ctx context.Context, addr string) {
	defer p.wg.Done()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			if s := p.add(conn); s != nil {
				select {
				case <-s.done:
				case <-ctx.Done():
					return
				}
			}
		}
		t := time.NewTimer(redialEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// add starts serving a subscriber's connection; nil once closed.
func (p *Pub) add(conn net.Conn) *peer {
	s := &peer{conn: conn, queue: make(chan []byte, subscriberQueue), done: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = conn.Close()
		return nil
	}
	p.subs[s] = struct{}{}
	p.wg.Add(2)
	go p.read(s)
	go p.write(s)
	return s
}

// read does the handshake, then takes the peer's subscriptions until it
// goes away.
func (p *Pub) read(s *peer) {
	defer p.wg.Done()
	defer p.drop(s)
	r := bufio.NewReader(s.conn)
	_ = s.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := handshake(s.conn, r, "PUB", "SUB", "XSUB"); err != nil {
		return
	}
	_ = s.conn.SetDeadline(time.Time{})
	var buf []byte
	for {
		f, b, err := readFrame(r, buf, MaxFrame)
		buf = b
		if err != nil {
			return
		}
		var sub bool
		var topic []byte
		if f.flags&flagCommand != 0 {
			name, data, err := parseCommand(f.body)
			if err != nil {
				return
			}
			switch name {
			case "SUBSCRIBE", "CANCEL":
				sub, topic = name == "SUBSCRIBE", data
			case "PING":
				if len(data) >= 2 {
					s.enqueue(appendFrame(nil, flagCommand, command("PONG", data[2:])))
				}
				continue
			default:
				continue
			}
		} else {
			if len(f.body) == 0 || f.body[0] > 1 {
				continue // a message a SUB should not send
			}
			sub, topic = f.body[0] == 1, f.body[1:]
		}
		if !s.subscribe(sub, bytes.Clone(topic)) {
			return
		}
	}
}

// subscribe adds or cancels a subscription; it reports false when the peer
// would hold more than maxSubscriptions.
func (s *peer) subscribe(sub bool, topic []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub {
		if len(s.topics) >= maxSubscriptions {
			return false
		}
		s.topics = append(s.topics, topic)
		return true
	}
	for i, t := range s.topics {
		if bytes.Equal(t, topic) {
			s.topics = append(s.topics[:i], s.topics[i+1:]...)
			break
		}
	}
	return true
}

func (s *peer) matches(first []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.topics {
		if bytes.HasPrefix(first, t) {
			return true
		}
	}
	return false
}

// enqueue queues a framed message, dropping it when the queue is full.
func (s *peer) enqueue(msg []byte) {
	select {
	case s.queue <- msg:
	default:
	}
}

func (p *Pub) write(s *peer) {
	defer p.wg.Done()
	w := bufio.NewWriter(s.conn)
	for {
		select {
		case <-s.done:
			return
		case msg := <-s.queue:
			if _, err := w.Write(msg); err != nil {
				_ = s.conn.Close()
				return
			}
			if len(s.queue) == 0 {
				if err := w.Flush(); err != nil {
					_ = s.conn.Close()
					return
				}
			}
		}
	}
}

// drop forgets a subscriber whose connection ended.
func (p *Pub) drop(s *peer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.subs[s]; ok {
		delete(p.subs, s)
		close(s.done)
		_ = s.conn.Close()
	}
}

// Send sends a message of the given frames to every subscriber whose
// subscription its first frame matches. It never blocks: a subscriber whose
// queue is full misses the message.
func (p *Pub) Send(parts ...[]byte) {
	if len(parts) == 0 {
		return
	}
	var msg []byte
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.subs {
		if !s.matches(parts[0]) {
			continue
		}
		if msg == nil {
			for i, part := range parts {
				flags := byte(flagMore)
				if i == len(parts)-1 {
					flags = 0
				}
				msg = appendFrame(msg, flags, part)
			}
		}
		s.enqueue(msg)
	}
}

// ErrClosed reports a Pub used after Close.
var ErrClosed = errors.New("kvevents: publisher closed")

// Close stops listening (or dialling), closes every subscriber and waits
// for their goroutines.
func (p *Pub) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	subs := make([]*peer, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	var err error
	if p.ln != nil {
		close(p.done)
		err = p.ln.Close()
	} else {
		p.stop()
	}
	for _, s := range subs {
		p.drop(s)
	}
	p.wg.Wait()
	return err
}

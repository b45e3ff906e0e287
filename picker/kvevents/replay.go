package kvevents

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// vLLM's publisher keeps its last batches (buffer_steps of them) and
// serves them again on a ZeroMQ ROUTER socket (replay_endpoint): a client
// sends an empty delimiter frame and the 8-byte big-endian sequence number
// to start from, and gets, each after an empty delimiter, one message per
// kept batch from that number on, of the sequence number and the payload,
// then an end message whose sequence number is all ones and whose payload
// is empty. TensorRT-LLM's publisher puts the topic before the sequence
// number in each reply; the client here reads both forms.

// endSeq is the sequence number of the message that ends a replay.
const endSeq = ^uint64(0)

// Replayer is the ROUTER side of replay: it keeps the last batches
// recorded and sends them to each client that asks.
type Replayer struct {
	srv  *server
	keep int

	mu   sync.Mutex
	kept []replayed // a ring of at most keep batches, oldest at head
	head int
}

type replayed struct {
	seq     uint64
	payload []byte
}

// ListenReplay listens on addr ("host:port"; port 0 picks one) and keeps
// the last keep batches recorded (at least one).
func ListenReplay(addr string, keep int) (*Replayer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return serveReplay(ln, keep), nil
}

// serveReplay is ListenReplay on ln.
func serveReplay(ln net.Listener, keep int) *Replayer {
	r := &Replayer{keep: max(keep, 1)}
	r.srv = newServer(ln, r.serve, logr.Discard())
	r.srv.start()
	return r
}

// Addr returns the address listened on.
func (r *Replayer) Addr() net.Addr { return r.srv.ln.Addr() }

// Record keeps a copy of the batch published with sequence number seq,
// forgetting the oldest kept one when keep are kept already.
func (r *Replayer) Record(seq uint64, payload []byte) {
	b := replayed{seq: seq, payload: append([]byte(nil), payload...)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.kept) < r.keep {
		r.kept = append(r.kept, b)
		return
	}
	r.kept[r.head] = b
	r.head = (r.head + 1) % len(r.kept)
}

// from returns the kept batches whose sequence number is seq or later, in
// the order recorded.
func (r *Replayer) from(seq uint64) []replayed {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []replayed
	for i := range r.kept {
		if b := r.kept[(r.head+i)%len(r.kept)]; b.seq >= seq {
			out = append(out, b)
		}
	}
	return out
}

// serve answers one client's requests until it goes away or sends what is
// not a request.
func (r *Replayer) serve(conn net.Conn) {
	br := bufio.NewReader(conn)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := handshake(conn, br, "ROUTER", "DEALER", "REQ"); err != nil {
		return
	}
	_ = conn.SetDeadline(time.Time{})
	s := &Sub{conn: conn, r: br}
	var parts [][]byte
	for {
		var err error
		if parts, err = s.Recv(parts); err != nil {
			return
		}
		delimited := len(parts) == 2 && len(parts[0]) == 0
		if delimited {
			parts = parts[1:]
		}
		if len(parts) != 1 || len(parts[0]) != 8 {
			return
		}
		w := bufio.NewWriter(conn)
		for _, b := range r.from(binary.BigEndian.Uint64(parts[0])) {
			writeReply(w, delimited, b.seq, b.payload)
		}
		writeReply(w, delimited, endSeq, nil)
		if err := w.Flush(); err != nil {
			return
		}
	}
}

// writeReply writes one reply message: the delimiter when the request had
// one, the sequence number, the payload.
func writeReply(w *bufio.Writer, delimited bool, seq uint64, payload []byte) {
	var msg []byte
	if delimited {
		msg = appendFrame(msg, flagMore, nil)
	}
	msg = appendFrame(msg, flagMore, binary.BigEndian.AppendUint64(nil, seq))
	msg = appendFrame(msg, 0, payload)
	_, _ = w.Write(msg)
}

// Close stops listening, ends every client's connection and waits for
// them.
func (r *Replayer) Close() error {
	already, err := r.srv.close()
	if already {
		return ErrClosed
	}
	return err
}

// Replay asks the replay endpoint at addr for the batches from sequence
// number from on, and calls each with every one in order until the end
// message. ctx bounds the whole exchange. An error from each ends the
// replay and is returned.
func Replay(ctx context.Context, addr string, from uint64, each func(seq uint64, payload []byte) error) error {
	req := appendFrame(nil, flagMore, nil)
	req = appendFrame(req, 0, binary.BigEndian.AppendUint64(nil, from))
	s, err := dialZMTP(ctx, addr, req, "DEALER", "ROUTER")
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var parts [][]byte
	for {
		if parts, err = s.Recv(parts); err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return fmt.Errorf("zmtp replay from %s: %w", addr, err)
		}
		seq, payload, err := replyParts(parts)
		if err != nil {
			return fmt.Errorf("zmtp replay from %s: %w", addr, err)
		}
		if seq == endSeq {
			return nil
		}
		if err := each(seq, payload); err != nil {
			return err
		}
	}
}

// errReply reports a replay reply of another shape than the two known.
var errReply = errors.New("a reply that is not [delimiter,] [topic,] sequence number, payload")

// replyParts reads a reply's sequence number and payload: after an
// optional empty delimiter, either the sequence number and the payload
// (vLLM) or the topic, the sequence number and the payload (TensorRT-LLM).
func replyParts(parts [][]byte) (seq uint64, payload []byte, err error) {
	if len(parts) > 0 && len(parts[0]) == 0 && len(parts) >= 3 {
		parts = parts[1:]
	}
	switch {
	case len(parts) == 2 && len(parts[0]) == 8:
		return binary.BigEndian.Uint64(parts[0]), parts[1], nil
	case len(parts) == 3 && len(parts[1]) == 8:
		return binary.BigEndian.Uint64(parts[1]), parts[2], nil
	}
	return 0, nil, errReply
}

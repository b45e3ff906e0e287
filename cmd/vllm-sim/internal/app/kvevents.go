package app

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/inferpick/inferpick/picker/kvevents"
)

// KVEventsConfig is vLLM's --kv-events-config, the fields the simulator
// uses; vLLM's others (hwm, max_queue_size, ...) are accepted and ignored.
type KVEventsConfig struct {
	Enabled   bool   `json:"enable_kv_cache_events"`
	Publisher string `json:"publisher"`
	Endpoint  string `json:"endpoint"`
	Topic     string `json:"topic"`
	// ReplayEndpoint, when set, serves the last BufferSteps batches again
	// to a client that asks (a ZeroMQ ROUTER socket).
	ReplayEndpoint string `json:"replay_endpoint"`
	BufferSteps    int    `json:"buffer_steps"`
}

// defaultBufferSteps is vLLM's buffer_steps default.
const defaultBufferSteps = 10_000

// parseKVEventsConfig reads the flag's JSON. A publisher left out is zmq,
// an endpoint left out is vLLM's tcp://*:5557, and buffer_steps is vLLM's
// 10,000. The values are checked by validate.
func parseKVEventsConfig(s string) (KVEventsConfig, error) {
	c := KVEventsConfig{Publisher: "zmq", Endpoint: "tcp://*:5557", BufferSteps: defaultBufferSteps}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return KVEventsConfig{}, fmt.Errorf("--kv-events-config: %w", err)
	}
	return c, nil
}

// publishes reports whether events are to be published: they are enabled
// and the publisher is not vLLM's "null" one.
func (c KVEventsConfig) publishes() bool { return c.Enabled && c.Publisher != "null" }

// binds reports whether the events endpoint is bound, as vLLM decides it:
// when it holds "*" or "::" (a wildcard address). Otherwise the simulator
// connects to it, as to a picker listening for its pods (llm-d's
// kvEventsConfig.zmqEndpoint).
func (c KVEventsConfig) binds() bool {
	return strings.Contains(c.Endpoint, "*") || strings.Contains(c.Endpoint, "::")
}

// validate checks an enabled configuration: the publisher is zmq (or
// null) and the endpoint one the simulator can bind, or connect to.
func (c KVEventsConfig) validate() error {
	if !c.Enabled {
		return nil
	}
	switch c.Publisher {
	case "zmq", "null":
	default:
		return fmt.Errorf("--kv-events-config: publisher %q: the simulator publishes over zmq only", c.Publisher)
	}
	if c.binds() {
		if _, _, err := hostPort("endpoint", c.Endpoint); err != nil {
			return err
		}
	} else if _, err := dialAddr(c.Endpoint); err != nil {
		return err
	}
	if c.ReplayEndpoint == "" {
		return nil
	}
	if c.BufferSteps < 1 {
		return fmt.Errorf("--kv-events-config: buffer_steps %d: a replay endpoint needs at least 1", c.BufferSteps)
	}
	_, _, err := hostPort("replay_endpoint", c.ReplayEndpoint)
	return err
}

// hostPort splits the endpoint named key, tcp://HOST:PORT, checking that
// HOST is "*", empty, localhost or an IP address and PORT a port number.
func hostPort(key, endpoint string) (host, port string, err error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", "", fmt.Errorf("--kv-events-config: %s %q: only tcp://HOST:PORT is served", key, endpoint)
	}
	host, port, err = net.SplitHostPort(rest)
	if err != nil {
		return "", "", fmt.Errorf("--kv-events-config: %s %q: %w", key, endpoint, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", "", fmt.Errorf("--kv-events-config: %s %q: port %q is not a port number", key, endpoint, port)
	}
	if host != "*" && host != "" && host != "localhost" && net.ParseIP(host) == nil {
		return "", "", fmt.Errorf("--kv-events-config: %s %q: host %q is not *, localhost or an IP address", key, endpoint, host)
	}
	return host, port, nil
}

// dialAddr is the TCP address to connect to for the events endpoint,
// tcp://HOST:PORT with HOST a name or an IP address and PORT not 0.
func dialAddr(endpoint string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", fmt.Errorf("--kv-events-config: endpoint %q: only tcp://HOST:PORT is served", endpoint)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return "", fmt.Errorf("--kv-events-config: endpoint %q: %w", endpoint, err)
	}
	if host == "" {
		return "", fmt.Errorf("--kv-events-config: endpoint %q: no host to connect to (bind with tcp://*:PORT)", endpoint)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "", fmt.Errorf("--kv-events-config: endpoint %q: port %q is not a port number to connect to", endpoint, port)
	}
	return rest, nil
}

// listenAddr is the TCP address to bind for the endpoint named key: its
// own, with the host "*" (or an empty one) meaning host, the simulator's
// --host.
func listenAddr(key, endpoint, host string) (string, error) {
	h, port, err := hostPort(key, endpoint)
	if err != nil {
		return "", err
	}
	if h == "*" || h == "" {
		h = host
	}
	return net.JoinHostPort(h, port), nil
}

// eventPublisher sends the engine's events as vLLM does: one message per
// batch, of three frames: the topic, an 8-byte big-endian sequence number
// counting from 0, and the msgpack batch. Its publish is called by the
// engine's loop only; Pub.Send never blocks it.
type eventPublisher struct {
	pub    *kvevents.Pub
	to     string             // the address pub connects to; empty when it listens
	replay *kvevents.Replayer // nil without a replay endpoint
	topic  []byte

	seq   uint64
	batch kvevents.Batch
	buf   []byte
}

// listenEvents binds (or connects, unless c.binds) the PUB sockets of c
// for the n engines of ranks first, first+1, ..., and binds their replay
// sockets when c has a replay endpoint: rank r's at the endpoint's port
// plus r, as vLLM offsets each data-parallel rank's endpoints, the host "*"
// meaning host. With port 0 the first engine's port is a free one and the
// others follow it. On failure the sockets already made are closed.
func listenEvents(ctx context.Context, c KVEventsConfig, host string, first, n int) ([]*eventPublisher, error) {
	var (
		pubs []*kvevents.Pub
		to   []string
		err  error
	)
	if c.binds() {
		pubs, err = listenRanks("endpoint", c.Endpoint, host, first, n, kvevents.ListenPub)
	} else {
		pubs, to, err = dialRanks(ctx, c.Endpoint, first, n)
	}
	if err != nil {
		return nil, err
	}
	out := make([]*eventPublisher, n)
	for e, p := range pubs {
		out[e] = &eventPublisher{pub: p, topic: []byte(c.Topic), batch: kvevents.Batch{DPRank: first + e}}
		if to != nil {
			out[e].to = to[e]
		}
	}
	if c.ReplayEndpoint == "" {
		return out, nil
	}
	replays, err := listenRanks("replay_endpoint", c.ReplayEndpoint, host, first, n, func(addr string) (*kvevents.Replayer, error) {
		return kvevents.ListenReplay(addr, c.BufferSteps)
	})
	if err != nil {
		for _, p := range out {
			_ = p.close()
		}
		return nil, err
	}
	for e, r := range replays {
		out[e].replay = r
	}
	return out, nil
}

// socket is what listenRanks binds: a Pub or a Replayer.
type socket interface {
	Addr() net.Addr
	Close() error
}

// listenRanks binds, with bind, the sockets of the endpoint named key for
// the n engines of ranks first, first+1, ...: rank r's at the endpoint's
// port plus r. On failure the sockets already bound are closed.
func listenRanks[S socket](key, endpoint, host string, first, n int, bind func(addr string) (S, error)) ([]S, error) {
	addr, err := listenAddr(key, endpoint, host)
	if err != nil {
		return nil, err
	}
	h, p, _ := net.SplitHostPort(addr) // listenAddr joined a checked host and port
	if port, _ := strconv.Atoi(p); port != 0 {
		if port+first+n-1 > 65535 {
			return nil, fmt.Errorf("KV events: the last engine's %s port %d is past 65535", key, port+first+n-1)
		}
		addr = net.JoinHostPort(h, strconv.Itoa(port+first))
	}
	var out []S
	for e := range n {
		if e > 0 {
			at := out[0].Addr().(*net.TCPAddr)
			addr = net.JoinHostPort(at.IP.String(), strconv.Itoa(at.Port+e))
		}
		b, err := bind(addr)
		if err != nil {
			for _, b := range out {
				_ = b.Close()
			}
			return nil, fmt.Errorf("KV events %s of engine %d: %w", key, first+e, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// dialRanks connects the PUB sockets of the n engines of ranks first,
// first+1, ... to the endpoint's host, rank r's at its port plus r, and
// returns them with their addresses; each keeps reconnecting whenever its
// connection ends, until ctx ends.
func dialRanks(ctx context.Context, endpoint string, first, n int) ([]*kvevents.Pub, []string, error) {
	addr, err := dialAddr(endpoint)
	if err != nil {
		return nil, nil, err
	}
	h, p, _ := net.SplitHostPort(addr) // dialAddr checked both
	port, _ := strconv.Atoi(p)
	if port+first+n-1 > 65535 {
		return nil, nil, fmt.Errorf("KV events: the last engine's endpoint port %d is past 65535", port+first+n-1)
	}
	pubs, to := make([]*kvevents.Pub, n), make([]string, n)
	for e := range n {
		to[e] = net.JoinHostPort(h, strconv.Itoa(port+first+e))
		pubs[e] = kvevents.DialPub(ctx, to[e])
	}
	return pubs, to, nil
}

// publish sends one batch of events, stamped with the wall time, on the
// publisher's data-parallel rank. Send copies the frames, so the buffers
// are reused.
func (p *eventPublisher) publish(events []kvevents.Event) {
	p.batch.TS = float64(time.Now().UnixNano()) / 1e9
	p.batch.Events = events
	p.buf = kvevents.AppendBatch(p.buf[:0], &p.batch)
	p.batch.Events = nil
	if p.replay != nil {
		p.replay.Record(p.seq, p.buf)
	}
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], p.seq)
	p.pub.Send(p.topic, seq[:], p.buf)
	p.seq++
}

// close closes the PUB socket and the replay socket, ending their
// clients' connections.
func (p *eventPublisher) close() error {
	err := p.pub.Close()
	if p.replay != nil {
		err = errors.Join(err, p.replay.Close())
	}
	return err
}

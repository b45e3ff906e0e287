package app

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/inferpick/inferpick/picker/kvevents"
)

// KVEventsConfig is vLLM's --kv-events-config, the fields the simulator
// uses; vLLM's others (replay_endpoint, buffer_steps, hwm, max_queue_size,
// ...) are accepted and ignored.
type KVEventsConfig struct {
	Enabled   bool   `json:"enable_kv_cache_events"`
	Publisher string `json:"publisher"`
	Endpoint  string `json:"endpoint"`
	Topic     string `json:"topic"`
}

// parseKVEventsConfig reads the flag's JSON. A publisher left out is zmq,
// and an endpoint left out is vLLM's tcp://*:5557. The values are checked
// by validate.
func parseKVEventsConfig(s string) (KVEventsConfig, error) {
	c := KVEventsConfig{Publisher: "zmq", Endpoint: "tcp://*:5557"}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return KVEventsConfig{}, fmt.Errorf("--kv-events-config: %w", err)
	}
	return c, nil
}

// publishes reports whether events are to be published: they are enabled
// and the publisher is not vLLM's "null" one.
func (c KVEventsConfig) publishes() bool { return c.Enabled && c.Publisher != "null" }

// validate checks an enabled configuration: the publisher is zmq (or
// null) and the endpoint one the simulator can bind.
func (c KVEventsConfig) validate() error {
	if !c.Enabled {
		return nil
	}
	switch c.Publisher {
	case "zmq", "null":
	default:
		return fmt.Errorf("--kv-events-config: publisher %q: the simulator publishes over zmq only", c.Publisher)
	}
	_, _, err := c.hostPort()
	return err
}

// hostPort splits the endpoint, tcp://HOST:PORT, checking that HOST is
// "*", empty, localhost or an IP address and PORT a port number.
func (c KVEventsConfig) hostPort() (host, port string, err error) {
	rest, ok := strings.CutPrefix(c.Endpoint, "tcp://")
	if !ok {
		return "", "", fmt.Errorf("--kv-events-config: endpoint %q: only tcp://HOST:PORT is served", c.Endpoint)
	}
	host, port, err = net.SplitHostPort(rest)
	if err != nil {
		return "", "", fmt.Errorf("--kv-events-config: endpoint %q: %w", c.Endpoint, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", "", fmt.Errorf("--kv-events-config: endpoint %q: port %q is not a port number", c.Endpoint, port)
	}
	if host != "*" && host != "" && host != "localhost" && net.ParseIP(host) == nil {
		return "", "", fmt.Errorf("--kv-events-config: endpoint %q: host %q is not *, localhost or an IP address", c.Endpoint, host)
	}
	return host, port, nil
}

// listenAddr is the TCP address to bind: the endpoint's, with the host "*"
// (or an empty one) meaning host, the simulator's --host.
func (c KVEventsConfig) listenAddr(host string) (string, error) {
	h, port, err := c.hostPort()
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
	pub   *kvevents.Pub
	topic []byte

	seq   uint64
	batch kvevents.Batch
	buf   []byte
}

// listenEvents binds the PUB sockets of c for the n engines of ranks
// first, first+1, ...: rank r's at the endpoint's port plus r, as vLLM
// offsets each data-parallel rank's endpoint, the host "*" meaning host.
// With port 0 the first engine's port is a free one and the others follow
// it. On failure the sockets already bound are closed.
func listenEvents(c KVEventsConfig, host string, first, n int) ([]*eventPublisher, error) {
	addr, err := c.listenAddr(host)
	if err != nil {
		return nil, err
	}
	h, p, _ := net.SplitHostPort(addr) // listenAddr joined a checked host and port
	if port, _ := strconv.Atoi(p); port != 0 {
		if port+first+n-1 > 65535 {
			return nil, fmt.Errorf("KV events: the last engine's port %d is past 65535", port+first+n-1)
		}
		addr = net.JoinHostPort(h, strconv.Itoa(port+first))
	}
	var pubs []*eventPublisher
	for e := range n {
		if e > 0 {
			at := pubs[0].pub.Addr().(*net.TCPAddr)
			addr = net.JoinHostPort(at.IP.String(), strconv.Itoa(at.Port+e))
		}
		pub, err := kvevents.ListenPub(addr)
		if err != nil {
			for _, p := range pubs {
				_ = p.close()
			}
			return nil, fmt.Errorf("KV events of engine %d: %w", first+e, err)
		}
		pubs = append(pubs, &eventPublisher{pub: pub, topic: []byte(c.Topic), batch: kvevents.Batch{DPRank: first + e}})
	}
	return pubs, nil
}

// publish sends one batch of events, stamped with the wall time, on the
// publisher's data-parallel rank. Send copies the frames, so the buffers
// are reused.
func (p *eventPublisher) publish(events []kvevents.Event) {
	p.batch.TS = float64(time.Now().UnixNano()) / 1e9
	p.batch.Events = events
	p.buf = kvevents.AppendBatch(p.buf[:0], &p.batch)
	p.batch.Events = nil
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], p.seq)
	p.pub.Send(p.topic, seq[:], p.buf)
	p.seq++
}

// close closes the PUB socket, ending its subscribers' connections.
func (p *eventPublisher) close() error { return p.pub.Close() }

package app

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/inferpick/inferpick/picker/kvevents"
)

// KVEventsConfig is vLLM's --kv-events-config, the fields the simulator
// uses; vLLM's others (replay_endpoint, buffer_steps, hwm, ...) are
// accepted and ignored.
type KVEventsConfig struct {
	Enabled   bool   `json:"enable_kv_cache_events"`
	Publisher string `json:"publisher"`
	Endpoint  string `json:"endpoint"`
	Topic     string `json:"topic"`
}

// parseKVEventsConfig reads the flag's JSON. A publisher left out is zmq,
// and an endpoint left out is vLLM's tcp://*:5557.
func parseKVEventsConfig(s string) (KVEventsConfig, error) {
	c := KVEventsConfig{Publisher: "zmq", Endpoint: "tcp://*:5557"}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return c, fmt.Errorf("--kv-events-config: %w", err)
	}
	if !c.Enabled {
		return c, nil
	}
	switch c.Publisher {
	case "zmq":
	case "null":
		c.Enabled = false
		return c, nil
	default:
		return c, fmt.Errorf("--kv-events-config: publisher %q: the simulator publishes over zmq only", c.Publisher)
	}
	if _, err := c.listenAddr("127.0.0.1"); err != nil {
		return c, err
	}
	return c, nil
}

// listenAddr is the TCP address to bind: the endpoint's, with the host "*"
// (or an empty one) meaning host.
func (c KVEventsConfig) listenAddr(host string) (string, error) {
	rest, ok := strings.CutPrefix(c.Endpoint, "tcp://")
	if !ok {
		return "", fmt.Errorf("--kv-events-config: endpoint %q: only tcp://HOST:PORT is served", c.Endpoint)
	}
	h, port, err := net.SplitHostPort(rest)
	if err != nil {
		return "", fmt.Errorf("--kv-events-config: endpoint %q: %w", c.Endpoint, err)
	}
	if h == "*" || h == "" {
		h = host
	}
	return net.JoinHostPort(h, port), nil
}

// eventPublisher sends the engine's events as vLLM does: one message per
// batch of topic, an 8-byte big-endian sequence number from 0, and the
// msgpack batch.
type eventPublisher struct {
	pub   *kvevents.Pub
	topic []byte

	mu    sync.Mutex
	seq   uint64
	batch kvevents.Batch
	buf   []byte
}

func (p *eventPublisher) publish(events []kvevents.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batch.TS = float64(time.Now().UnixNano()) / 1e9
	p.batch.Events = events
	p.buf = kvevents.AppendBatch(p.buf[:0], &p.batch)
	p.pub.Send(p.topic, binary.BigEndian.AppendUint64(nil, p.seq), append([]byte(nil), p.buf...))
	p.seq++
}

package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/kvcache"
	"github.com/inferpick/inferpick/picker/kvevents"
	"github.com/inferpick/inferpick/test/framework"
)

func TestKVEventsConfig(t *testing.T) {
	cases := map[string]struct {
		in          string
		want        KVEventsConfig
		publishes   bool
		parseErr    bool
		validateErr bool
	}{
		"vLLM's example": {
			in:   `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv@a","replay_endpoint":"tcp://*:5558","buffer_steps":100,"hwm":1000,"max_queue_size":10}`,
			want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://*:5557", Topic: "kv@a", ReplayEndpoint: "tcp://*:5558", BufferSteps: 100}, publishes: true,
		},
		"defaults":       {in: `{"enable_kv_cache_events":true}`, want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://*:5557", BufferSteps: defaultBufferSteps}, publishes: true},
		"IP and port 0":  {in: `{"enable_kv_cache_events":true,"endpoint":"tcp://[::1]:0"}`, want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://[::1]:0", BufferSteps: defaultBufferSteps}, publishes: true},
		"off":            {in: `{"enable_kv_cache_events":false,"publisher":"nats","endpoint":"x"}`, want: KVEventsConfig{Publisher: "nats", Endpoint: "x", BufferSteps: defaultBufferSteps}},
		"null publisher": {in: `{"enable_kv_cache_events":true,"publisher":"null"}`, want: KVEventsConfig{Enabled: true, Publisher: "null", Endpoint: "tcp://*:5557", BufferSteps: defaultBufferSteps}},
		"unknown publisher": {
			in:   `{"enable_kv_cache_events":true,"publisher":"nats"}`,
			want: KVEventsConfig{Enabled: true, Publisher: "nats", Endpoint: "tcp://*:5557", BufferSteps: defaultBufferSteps}, publishes: true, validateErr: true,
		},
		"ipc endpoint": {
			in:   `{"enable_kv_cache_events":true,"endpoint":"ipc:///tmp/kv"}`,
			want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "ipc:///tmp/kv", BufferSteps: defaultBufferSteps}, publishes: true, validateErr: true,
		},
		"no port": {
			in:   `{"enable_kv_cache_events":true,"endpoint":"tcp://*"}`,
			want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://*", BufferSteps: defaultBufferSteps}, publishes: true, validateErr: true,
		},
		"port out of range": {
			in:   `{"enable_kv_cache_events":true,"endpoint":"tcp://*:65536"}`,
			want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://*:65536", BufferSteps: defaultBufferSteps}, publishes: true, validateErr: true,
		},
		"a host name, connected to": {
			in:   `{"enable_kv_cache_events":true,"endpoint":"tcp://epp.llm-d.svc:5557","topic":"kv@10.0.0.1@m"}`,
			want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://epp.llm-d.svc:5557", Topic: "kv@10.0.0.1@m", BufferSteps: defaultBufferSteps}, publishes: true,
		},
		"no host to connect to": {
			in:   `{"enable_kv_cache_events":true,"endpoint":"tcp://:5557"}`,
			want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://:5557", BufferSteps: defaultBufferSteps}, publishes: true, validateErr: true,
		},
		"port 0 to connect to": {
			in:   `{"enable_kv_cache_events":true,"endpoint":"tcp://10.0.0.9:0"}`,
			want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://10.0.0.9:0", BufferSteps: defaultBufferSteps}, publishes: true, validateErr: true,
		},
		"replay, no buffer": {
			in:   `{"enable_kv_cache_events":true,"replay_endpoint":"tcp://*:5558","buffer_steps":0}`,
			want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://*:5557", ReplayEndpoint: "tcp://*:5558"}, publishes: true, validateErr: true,
		},
		"replay endpoint ipc": {
			in:   `{"enable_kv_cache_events":true,"replay_endpoint":"ipc:///tmp/replay"}`,
			want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://*:5557", ReplayEndpoint: "ipc:///tmp/replay", BufferSteps: defaultBufferSteps}, publishes: true, validateErr: true,
		},
		"not JSON":   {in: `enable`, parseErr: true},
		"wrong type": {in: `{"enable_kv_cache_events":"yes"}`, parseErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.AddFlags(fs)
			err := fs.Parse([]string{"--kv-events-config", tc.in})
			if (err != nil) != tc.parseErr {
				t.Fatalf("parse error %v, want error %v", err, tc.parseErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, o.KVEvents); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got := o.KVEvents.publishes(); got != tc.publishes {
				t.Errorf("publishes() = %v, want %v", got, tc.publishes)
			}
			if err := o.Validate(); (err != nil) != tc.validateErr {
				t.Errorf("Validate() = %v, want error %v", err, tc.validateErr)
			}
		})
	}
}

// TestRunAnnouncesKVEvents checks that Run binds the events endpoint on
// --host, prints its real address before the HTTP one, and closes it at
// stop.
func TestRunAnnouncesKVEvents(t *testing.T) {
	o := parse(t, "--host", "127.0.0.7", "--port", "0", "--time-scale", "0",
		"--kv-events-config", `{"enable_kv_cache_events":true,"endpoint":"tcp://*:0"}`)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, done := startRun(ctx, o)
	r := bufio.NewReader(pr)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the announcement: %v", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "vllm-sim KV events on tcp://")
	if !ok || !strings.HasPrefix(addr, "127.0.0.7:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("first announcement %q, want the real events address on 127.0.0.7", line)
	}
	if line, err = r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "vllm-sim listening on http://127.0.0.7:") {
		t.Fatalf("second announcement %q (%v), want the HTTP address", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	sub, err := kvevents.DialSub(t.Context(), addr, nil)
	if err != nil {
		t.Fatalf("subscribing: %v", err)
	}
	defer sub.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after stop: %v", err)
	}
	if _, err := sub.Recv(nil); err == nil {
		t.Error("the subscription outlived the simulator")
	}
}

// parse returns the options of args, validated.
func parse(t *testing.T, args ...string) *Options {
	t.Helper()
	o := NewOptions()
	fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	return o
}

// simWithEvents serves the simulator with KV-cache events on free ports on
// 127.0.0.8, subscribed to before it starts, and returns its HTTP base URL
// and the subscriber's batches. It checks that every message has vLLM's
// three frames and that the sequence numbers count from 0 without a gap.
func simWithEvents(t *testing.T, args ...string) (base string, batches <-chan kvevents.Batch) {
	t.Helper()
	base, all := simWithEngineEvents(t, args...)
	return base, all[0]
}

// simWithEngineEvents is simWithEvents with a channel of batches for each
// engine (--data-parallel-size).
func simWithEngineEvents(t *testing.T, args ...string) (base string, batches []<-chan kvevents.Batch) {
	t.Helper()
	o := parse(t, append([]string{"--host", "127.0.0.8", "--port", "0", "--model", "m", "--time-scale", "0",
		"--kv-events-config", `{"enable_kv_cache_events":true,"endpoint":"tcp://*:0","topic":"kv@m"}`}, args...)...)
	events, err := listenEvents(t.Context(), o.KVEvents, o.Host, o.DataParallelStartRank, o.engines())
	if err != nil {
		t.Fatal(err)
	}
	var subs []*kvevents.Sub
	for _, p := range events {
		sub, err := kvevents.DialSub(t.Context(), p.pub.Addr().String(), []byte("kv@"))
		if err != nil {
			t.Fatal(err)
		}
		waitSubscribed(t, p.pub)
		subs = append(subs, sub)
	}

	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = serve(ctx, o, pw, events)
		pw.Close()
	}()
	var received []<-chan struct{}
	for i, sub := range subs {
		ch, done := receive(t, sub, o.DataParallelStartRank+i)
		batches, received = append(batches, ch), append(received, done)
	}
	t.Cleanup(func() {
		cancel()
		<-served
		for _, p := range events {
			_ = p.close()
		}
		for i, sub := range subs {
			_ = sub.Close()
			<-received[i]
		}
	})
	r := bufio.NewReader(pr)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the announcement: %v", err)
	}
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "vllm-sim listening on ")
	if !ok {
		t.Fatalf("announcement %q", line)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	return base, batches
}

// waitSubscribed waits until the publisher has a subscriber.
func waitSubscribed(t *testing.T, pub *kvevents.Pub) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for pub.Subscribers() == 0 {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the subscription did not reach the publisher")
		}
	}
}

// receive decodes sub's messages into batches until sub is closed; done is
// closed when it stops.
func receive(t *testing.T, sub *kvevents.Sub, rank int) (batches <-chan kvevents.Batch, done <-chan struct{}) {
	ch, stopped := make(chan kvevents.Batch, 1000), make(chan struct{})
	go func() {
		defer close(stopped)
		var parts [][]byte
		var err error
		for next := uint64(0); ; next++ {
			if parts, err = sub.Recv(parts); err != nil {
				return // closed
			}
			if len(parts) != 3 || string(parts[0]) != "kv@m" || len(parts[1]) != 8 {
				t.Errorf("message of %d parts, topic %q", len(parts), parts[0])
				return
			}
			if seq := binary.BigEndian.Uint64(parts[1]); seq != next {
				t.Errorf("sequence number %d, want %d", seq, next)
			}
			var b kvevents.Batch
			if err := kvevents.DecodeBatch(parts[2], &b); err != nil {
				t.Errorf("batch %d: %v", next, err)
				return
			}
			if b.DPRank != rank || b.TS <= 0 {
				t.Errorf("batch %d: rank %d, ts %v", next, b.DPRank, b.TS)
			}
			select {
			case ch <- b:
			default:
				t.Errorf("batch %d: the test reads too slowly", next)
				return
			}
		}
	}()
	return ch, stopped
}

func post(t *testing.T, url, body string) []byte {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s %v", url, resp.StatusCode, b, err)
	}
	return b
}

// nextBatch returns the events of the next batch.
func nextBatch(t *testing.T, ch <-chan kvevents.Batch) []kvevents.Event {
	t.Helper()
	select {
	case b := <-ch:
		return b.Events
	case <-time.After(10 * time.Second):
		t.Fatal("no batch within 10 s")
	}
	return nil
}

// text decodes the simulator's token ids back to text.
func text(ids []uint32) string {
	var b bytes.Buffer
	for _, id := range ids {
		b.Write(binary.LittleEndian.AppendUint32(nil, id))
	}
	return b.String()
}

// cacheReplay keeps the blocks the events say are cached.
type cacheReplay map[uint64]bool

func (c cacheReplay) apply(t *testing.T, evs []kvevents.Event) {
	t.Helper()
	for i := range evs {
		ev := &evs[i]
		for _, h := range ev.Hashes {
			switch ev.Kind {
			case kvevents.BlockStored:
				c[h] = true
			case kvevents.BlockRemoved:
				if !c[h] {
					t.Errorf("block %x removed but never stored", h)
				}
				delete(c, h)
			default:
				t.Errorf("event of kind %v", ev.Kind)
			}
		}
	}
}

func TestKVEventsFollowTheCache(t *testing.T) {
	base, ch := simWithEvents(t, "--block-size", "4", "--num-gpu-blocks", "64")
	replay := cacheReplay{}
	system := strings.Repeat("You are a careful assistant. ", 4) // 116 bytes
	chat := func(q string) string {
		return fmt.Sprintf(`{"model":"m","max_tokens":1,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, system, q)
	}
	render := func(q string) string { return "<|system|>\n" + system + "\n<|user|>\n" + q + "\n<|assistant|>\n" }
	const blockBytes = 4 * kvcache.BytesPerToken

	// The first chat stores every full block of its prompt, in one run
	// named as the cache names them.
	post(t, base+"/v1/chat/completions", chat("first question"))
	evs := nextBatch(t, ch)
	replay.apply(t, evs)
	if len(evs) != 1 {
		t.Fatalf("the first chat's events %+v, want one BlockStored", evs)
	}
	first := evs[0]
	rendered := render("first question")
	full := len(rendered) / blockBytes
	want := kvevents.Event{Kind: kvevents.BlockStored, Hashes: kvcache.BlockHashes(rendered, 4),
		TokenIDs: first.TokenIDs, BlockSize: 4, Medium: "GPU"}
	if diff := cmp.Diff(want, first); diff != "" {
		t.Fatalf("the first chat's event (-want +got):\n%s", diff)
	}
	if got := text(first.TokenIDs); got != rendered[:full*blockBytes] {
		t.Errorf("token ids read back %q, want %q", got, rendered[:full*blockBytes])
	}

	// /tokenize gives the same ids for the same chat.
	var tok struct {
		Count  int      `json:"count"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(post(t, base+"/tokenize", chat("first question")), &tok); err != nil {
		t.Fatal(err)
	}
	if tok.Count != len(tok.Tokens) || len(tok.Tokens) < full*4 {
		t.Fatalf("/tokenize: count %d of %d tokens, want at least the %d of the stored blocks", tok.Count, len(tok.Tokens), full*4)
	}
	if diff := cmp.Diff(first.TokenIDs, tok.Tokens[:full*4]); diff != "" {
		t.Errorf("/tokenize's full blocks (-events +tokenize):\n%s", diff)
	}

	// A second chat with the same system prompt stores only what follows
	// the shared blocks, chained to the last of them.
	q2 := "second question, longer than the first"
	post(t, base+"/v1/chat/completions", chat(q2))
	evs = nextBatch(t, ch)
	replay.apply(t, evs)
	shared := len("<|system|>\n"+system+"\n<|user|>\n") / blockBytes
	rendered2 := render(q2)
	hs2 := kvcache.BlockHashes(rendered2, 4)
	if len(evs) != 1 || !evs[0].HasParent || evs[0].Parent != first.Hashes[shared-1] {
		t.Fatalf("events %+v, want one BlockStored chained to block %d (%x)", evs, shared-1, first.Hashes[shared-1])
	}
	if diff := cmp.Diff(hs2[shared:], evs[0].Hashes); diff != "" {
		t.Errorf("the second chat's stored blocks (-want +got):\n%s", diff)
	}
	if got, want := text(evs[0].TokenIDs), rendered2[shared*blockBytes:len(hs2)*blockBytes]; got != want {
		t.Errorf("the second chat's stored tokens read back %q, want %q", got, want)
	}

	// Filling the cache with other prompts evicts the first chat's blocks.
	for i := 0; keep(replay, first.Hashes) > 0; i++ {
		if i == 40 {
			t.Fatalf("after %d more prompts %d of the first chat's %d blocks are still cached", i, keep(replay, first.Hashes), len(first.Hashes))
		}
		post(t, base+"/v1/completions", fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":1}`, strings.Repeat(string(rune('a'+i)), 100)))
		replay.apply(t, nextBatch(t, ch))
	}
	// The events replayed give the blocks the cache holds.
	var stats struct {
		CachedBlocks int `json:"cached_blocks"`
	}
	if err := json.Unmarshal(get(t, base+"/sim/stats"), &stats); err != nil {
		t.Fatal(err)
	}
	if stats.CachedBlocks != len(replay) {
		t.Errorf("%d blocks cached, the events say %d", stats.CachedBlocks, len(replay))
	}
}

// keep returns how many of hs are in m.
func keep(m cacheReplay, hs []uint64) int {
	n := 0
	for _, h := range hs {
		if m[h] {
			n++
		}
	}
	return n
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s %v", url, resp.StatusCode, b, err)
	}
	return b
}

// TestDataParallelEnginesShareThePort serves two engines behind one port,
// as vLLM's --data-parallel-size does: a request arriving while the first
// engine holds one goes to the second, each engine publishes the blocks it
// caches on its own events port (the second's is the first's plus one,
// with its rank in the batches), and every series of the metrics names its
// engine.
func TestDataParallelEnginesShareThePort(t *testing.T) {
	base, batches := simWithEngineEvents(t, "--data-parallel-size", "2", "--time-scale", "1", "--decode-ms-per-token", "200")
	long, short := strings.Repeat("a", 200), strings.Repeat("b", 200) // 3 blocks of 16 tokens each
	ctx, cancel := context.WithCancel(t.Context())
	held := make(chan struct{})
	go func() {
		defer close(held)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions",
			strings.NewReader(fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":100,"stream":true}`, long)))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	t.Cleanup(func() { cancel(); <-held })

	running := `vllm:num_requests_running{engine="0",model_name="m"} 1`
	framework.Eventually(t, framework.Timeout, "the first engine runs the long request", func() error {
		if !strings.Contains(string(get(t, base+"/metrics")), running) {
			return errors.New("not yet")
		}
		return nil
	})
	post(t, base+"/v1/completions", fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":1}`, short))

	for e, prompt := range []string{long, short} {
		select {
		case b := <-batches[e]:
			if b.DPRank != e || len(b.Events) != 1 || text(b.Events[0].TokenIDs) != prompt[:len(b.Events[0].TokenIDs)*4] ||
				len(b.Events[0].Hashes) != 3 {
				t.Errorf("engine %d's first batch: rank %d, events %+v; want rank %d storing the 3 blocks of its prompt", e, b.DPRank, b.Events, e)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("engine %d published nothing within 10 s", e)
		}
	}
	page := string(get(t, base+"/metrics"))
	for _, want := range []string{running, `vllm:request_success_total{engine="1",finished_reason="length",model_name="m"} 1`,
		`vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 0`} {
		if !strings.Contains(page, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestANodesEnginesTakeTheirRanks serves the engines of ranks 2 and 3 of a
// deployment of 4 behind one port, as one node of vLLM's hybrid load
// balancer does (--data-parallel-size-local 2 --data-parallel-start-rank
// 2): they publish on the endpoint's port plus their rank, with their rank
// in the batches, and label their metrics with it.
func TestANodesEnginesTakeTheirRanks(t *testing.T) {
	const host = "127.0.0.8"
	port := framework.ConsecutivePortsT(t, host, 4)
	base, batches := simWithEngineEvents(t, "--data-parallel-size", "4", "--data-parallel-size-local", "2", "--data-parallel-start-rank", "2",
		"--kv-events-config", fmt.Sprintf(`{"enable_kv_cache_events":true,"endpoint":"tcp://*:%d","topic":"kv@m"}`, port))
	post(t, base+"/v1/completions", fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":1}`, strings.Repeat("a", 200)))
	select {
	case b := <-batches[0]:
		if b.DPRank != 2 || len(b.Events) != 1 || len(b.Events[0].Hashes) != 3 {
			t.Errorf("the first engine's first batch: rank %d, events %+v; want rank 2 storing the prompt's 3 blocks", b.DPRank, b.Events)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the engine of rank 2 published nothing within 10 s")
	}
	page := string(get(t, base+"/metrics"))
	for _, want := range []string{`vllm:request_success_total{engine="2",finished_reason="length",model_name="m"} 1`,
		`vllm:num_requests_running{engine="3",model_name="m"} 0`} {
		if !strings.Contains(page, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(page, `engine="0"`) || strings.Contains(page, `engine="1"`) {
		t.Error("metrics name engines of ranks this port does not serve")
	}
}

// TestEnginesListenOnTheirRanksPorts binds the events of ranks 2 and 3 on
// the endpoint's port plus 2 and plus 3, and refuses ranks whose port would
// be past the last.
func TestEnginesListenOnTheirRanksPorts(t *testing.T) {
	const host = "127.0.0.8"
	port := framework.ConsecutivePortsT(t, host, 4)
	c := KVEventsConfig{Enabled: true, Endpoint: fmt.Sprintf("tcp://*:%d", port)}
	pubs, err := listenEvents(t.Context(), c, host, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pubs {
		if got, want := p.pub.Addr().(*net.TCPAddr).Port, port+2+i; got != want || p.batch.DPRank != 2+i {
			t.Errorf("engine %d of the port: listens on %d with rank %d, want %d with rank %d", i, got, p.batch.DPRank, want, 2+i)
		}
		_ = p.close()
	}
	c.Endpoint = "tcp://*:65534"
	if _, err := listenEvents(t.Context(), c, host, 1, 2); err == nil {
		t.Error("ranks 1 and 2 on 65534: no error, want one (the last port is past 65535)")
	}
}

// TestEnginesConnectToTheirRanksPorts: an endpoint with neither "*" nor
// "::" is connected to, as vLLM does, rank r's at the endpoint's port plus
// r, and connected to again once the listening side comes back.
func TestEnginesConnectToTheirRanksPorts(t *testing.T) {
	const host = "127.0.0.9"
	port := framework.ConsecutivePortsT(t, host, 2)
	got := make(chan [2]string, 10) // the address listened on, the topic
	listen := func(r int) *kvevents.SubListener {
		addr := net.JoinHostPort(host, strconv.Itoa(port+r))
		l, err := kvevents.ListenSub(addr, nil, func(s *kvevents.Sub) {
			for {
				parts, err := s.Recv(nil)
				if err != nil {
					return
				}
				var b kvevents.Batch
				if len(parts) == 3 && kvevents.DecodeBatch(parts[2], &b) == nil && b.DPRank == r {
					got <- [2]string{addr, string(parts[0])}
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	listeners := []*kvevents.SubListener{listen(0), listen(1)}
	c := KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: fmt.Sprintf("tcp://%s:%d", host, port), Topic: "kv@10.0.0.1@m"}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	pubs, err := listenEvents(t.Context(), c, "127.0.0.1", 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, p := range pubs {
			_ = p.close()
		}
	}()
	// publishOnce publishes on each engine until its listener has the batch.
	publishOnce := func(what string) {
		t.Helper()
		for r, p := range pubs {
			want := [2]string{net.JoinHostPort(host, strconv.Itoa(port+r)), "kv@10.0.0.1@m"}
			framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s: rank %d's batch reaches its port", what, r), func() error {
				p.publish(nil)
				select {
				case g := <-got:
					if g != want {
						return fmt.Errorf("got %v, want %v", g, want)
					}
					return nil
				case <-time.After(50 * time.Millisecond):
					return errors.New("nothing yet")
				}
			})
		}
	}
	publishOnce("at first")
	for _, l := range listeners {
		_ = l.Close()
	}
	listen(0)
	listen(1)
	publishOnce("after the listeners came back")
}

// TestReplayServesTheBatchesPublished runs the simulator with two engines
// and a replay endpoint each, on the ranks' ports: after a completion, a
// replay from 0 of the engine that served it brings the batch that stored
// its prompt, as its subscribers got it, and the other engine's nothing.
func TestReplayServesTheBatchesPublished(t *testing.T) {
	const host = "127.0.0.8"
	port := framework.ConsecutivePortsT(t, host, 2)
	base, chs := simWithEngineEvents(t, "--kv-events-config",
		fmt.Sprintf(`{"enable_kv_cache_events":true,"endpoint":"tcp://*:0","topic":"kv@m","replay_endpoint":"tcp://*:%d","buffer_steps":4}`, port),
		"--data-parallel-size", "2")
	post(t, base+"/v1/completions", `{"model":"m","max_tokens":1,"prompt":"`+strings.Repeat("a long enough prompt ", 20)+`"}`)
	var (
		want   []kvevents.Event
		served int
	)
	select {
	case b := <-chs[0]:
		want = b.Events
	case b := <-chs[1]:
		want, served = b.Events, 1
	case <-time.After(10 * time.Second):
		t.Fatal("no batch within 10 s")
	}
	for e := range 2 {
		var got []kvevents.Event
		err := kvevents.Replay(t.Context(), net.JoinHostPort(host, strconv.Itoa(port+e)), 0, func(_ uint64, payload []byte) error {
			var b kvevents.Batch
			if err := kvevents.DecodeBatch(payload, &b); err != nil {
				return err
			}
			got = append(got, b.Events...)
			return nil
		})
		if err != nil {
			t.Fatalf("engine %d: %v", e, err)
		}
		if e != served {
			if len(got) != 0 {
				t.Errorf("engine %d served nothing, yet its replay brought %d events", e, len(got))
			}
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("engine %d: replayed events (-published +replayed):\n%s", e, diff)
		}
	}
}

// TestABatchsPromptsArePlacedOneByOne sends one completion of two prompts
// to two engines behind one port: as vLLM's balancer places each prompt of
// a batch on its own, the second goes to the engine the first left idle,
// and each engine counts and times its prompt.
func TestABatchsPromptsArePlacedOneByOne(t *testing.T) {
	// In real time, the first prompt is still queued or running on its
	// engine when the second is placed a moment later.
	base, _ := simWithEngineEvents(t, "--data-parallel-size", "2", "--time-scale", "1")
	post(t, base+"/v1/completions", fmt.Sprintf(`{"model":"m","prompt":[%q,%q],"max_tokens":1}`, strings.Repeat("a", 200), strings.Repeat("b", 200)))
	page := string(get(t, base+"/metrics"))
	for _, e := range []string{"0", "1"} {
		for _, want := range []string{`vllm:request_success_total{engine="` + e + `",finished_reason="length",model_name="m"} 1`,
			`vllm:time_to_first_token_seconds_count{engine="` + e + `",model_name="m"} 1`,
			`vllm:e2e_request_latency_seconds_count{engine="` + e + `",model_name="m"} 1`} {
			if !strings.Contains(page, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
	}
}

package kvindex

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/kvevents"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/framework"
)

// pod is the endpoint of port (rank 0 and up from 8000) of a pod at ip.
func pod(uid, ip string, port uint16, rank int) registry.Endpoint {
	return registry.Endpoint{Key: registry.Key{UID: uid, Port: int32(port)}, Name: uid,
		Address: netip.AddrPortFrom(netip.MustParseAddr(ip), port), Rank: rank}
}

// listening runs a Subscriber that only listens, on a free loopback port,
// for a registry of eps; it returns the subscriber, the registry and the
// address publishers connect to.
func listening(t *testing.T, sub *Subscriber, eps ...registry.Endpoint) (*registry.Registry, string) {
	t.Helper()
	if sub.Index == nil {
		sub.Index = New(0)
	}
	sub.Listen = "127.0.0.1:0"
	reg := runSubscriber(t, sub, eps...)
	var addr string
	framework.Eventually(t, framework.Timeout, "the subscriber listens", func() error {
		a := sub.ListenAddr()
		if a == nil {
			return errors.New("not yet")
		}
		addr = a.String()
		return nil
	})
	return reg, addr
}

// connectPub connects a PUB socket to addr and waits until the subscriber
// has it.
func connectPub(t *testing.T, sub *Subscriber, addr string, connected int) *kvevents.Pub {
	t.Helper()
	p := kvevents.DialPub(t.Context(), addr)
	t.Cleanup(func() { _ = p.Close() })
	framework.Eventually(t, framework.Timeout, "the publisher is connected and subscribed to", func() error {
		if n := p.Subscribers(); n != 1 {
			return fmt.Errorf("%d subscribers", n)
		}
		if n := sub.Connected(); n != connected {
			return fmt.Errorf("%d connected, want %d", n, connected)
		}
		return nil
	})
	return p
}

// send publishes one batch of events on rank under topic, numbered seq.
func send(p *kvevents.Pub, topic string, seq uint64, rank int, events ...kvevents.Event) {
	batch := kvevents.Batch{TS: 1, DPRank: rank, Events: events}
	p.Send([]byte(topic), binary.BigEndian.AppendUint64(nil, seq), kvevents.AppendBatch(nil, &batch))
}

func workerAt(t *testing.T, reg *registry.Registry, addr string) *registry.Worker {
	t.Helper()
	for _, w := range reg.AllWorkers() {
		if w.Address() == addr {
			return w
		}
	}
	t.Fatalf("no worker at %s", addr)
	return nil
}

// holders waits until tokens are held as want says.
func holders(t *testing.T, ix *Index, what string, tokens []uint32, want []Hold) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, what, func() error {
		if diff := cmp.Diff(want, ix.Lookup(tokens, "", "", nil)); diff != "" {
			return fmt.Errorf("holders (-want +got):\n%s", diff)
		}
		return nil
	})
}

// Two pods connect, one naming its IP, the other IP:port: each one's
// blocks are found on its own worker. A publisher naming an address no
// worker has is dropped, counted per batch and logged once.
func TestListenAppliesEachPodsEventsToItsWorker(t *testing.T) {
	var logged framework.LogLines
	sub := &Subscriber{Log: logged.Logger()}
	reg, addr := listening(t, sub, pod("a", "10.0.0.1", 8000, 0), pod("b", "10.0.0.2", 8000, 0), pod("b", "10.0.0.2", 8001, 1))
	a, b1 := workerAt(t, reg, "10.0.0.1:8000"), workerAt(t, reg, "10.0.0.2:8001")

	pa := connectPub(t, sub, addr, 1)
	pb := connectPub(t, sub, addr, 2)
	stray := connectPub(t, sub, addr, 3)
	one, two := prompt(1, 4, -1), prompt(500, 4, -1)
	send(pa, "kv@10.0.0.1@m", 0, 0, stored(1, one, 0, 4, ""))
	send(pb, "kv@10.0.0.2:8001@m", 0, 1, stored(2, two, 0, 4, ""))
	for i := range 3 {
		send(stray, "kv@10.9.9.9@m", uint64(i), 0, stored(3, one, 0, 4, ""))
	}
	holders(t, sub.Index, "the first pod's prompt", one, []Hold{{Worker: a.ID(), Blocks: 4, Prompt: 4}})
	holders(t, sub.Index, "the second pod's prompt", two, []Hold{{Worker: b1.ID(), Blocks: 4, Prompt: 4}})
	framework.Eventually(t, framework.Timeout, "the stray batches are counted", func() error {
		if n := sub.strayBatches.Load(); n != 3 {
			return fmt.Errorf("%d stray batches, want 3", n)
		}
		return nil
	})
	if n := strings.Count(logged.String(), "10.9.9.9"); n != 1 {
		t.Errorf("the stray topic was logged %d times, want once:\n%s", n, logged.String())
	}
}

// A pod's ranks: with a port each (vLLM's external load balancer) the
// batch's rank picks the port's worker; behind one port whose metrics
// name both engines, the one worker takes both, engine by engine.
func TestListenPicksTheWorkerOfTheBatchsRank(t *testing.T) {
	sub := &Subscriber{}
	reg, addr := listening(t, sub, pod("ext", "10.0.0.1", 8000, 0), pod("ext", "10.0.0.1", 8001, 1), pod("int", "10.0.0.2", 8000, 0))
	r0, r1, in := workerAt(t, reg, "10.0.0.1:8000"), workerAt(t, reg, "10.0.0.1:8001"), workerAt(t, reg, "10.0.0.2:8000")
	in.SetMetrics(&registry.Metrics{Engines: 1<<0 | 1<<1})

	p := connectPub(t, sub, addr, 1)
	a, b, c, d := prompt(1, 4, -1), prompt(500, 4, -1), prompt(900, 4, -1), prompt(1300, 4, -1)
	send(p, "kv@10.0.0.1@m", 0, 0, stored(1, a, 0, 4, ""))
	send(p, "kv@10.0.0.1@m", 1, 1, stored(2, b, 0, 4, ""))
	send(p, "kv@10.0.0.2@m", 2, 0, stored(3, c, 0, 4, ""))
	send(p, "kv@10.0.0.2@m", 3, 1, stored(4, d, 0, 4, ""))
	holders(t, sub.Index, "rank 0's prompt", a, []Hold{{Worker: r0.ID(), Blocks: 4, Prompt: 4}})
	holders(t, sub.Index, "rank 1's prompt", b, []Hold{{Worker: r1.ID(), Blocks: 4, Prompt: 4}})
	// One engine of two holding a prompt counts half.
	holders(t, sub.Index, "engine 0's prompt behind one port", c, []Hold{{Worker: in.ID(), Blocks: 2, Prompt: 4}})
	holders(t, sub.Index, "engine 1's prompt behind one port", d, []Hold{{Worker: in.ID(), Blocks: 2, Prompt: 4}})
}

// A topic longer than any pod's is counted as unmatched and logged by its
// start: it is never kept whole, so publishers cannot make the picker hold
// their topics' bytes.
func TestListenKeepsNoLongTopic(t *testing.T) {
	var logged framework.LogLines
	sub := &Subscriber{Log: logged.Logger()}
	_, addr := listening(t, sub, pod("a", "10.0.0.1", 8000, 0))
	p := connectPub(t, sub, addr, 1)
	for i := range 3 {
		send(p, fmt.Sprintf("kv@10.9.9.9@%s%d", strings.Repeat("m", 100_000), i), uint64(i), 0, stored(1, prompt(1, 4, -1), 0, 4, ""))
	}
	framework.Eventually(t, framework.Timeout, "the batches are counted as unmatched", func() error {
		if n := sub.strayBatches.Load(); n != 3 {
			return fmt.Errorf("%d unmatched batches, want 3", n)
		}
		return nil
	})
	sub.strayMu.Lock()
	for topic := range sub.strays {
		if len(topic) > 512 {
			t.Errorf("a topic of %d bytes is kept", len(topic))
		}
	}
	sub.strayMu.Unlock()
	if n := strings.Count(logged.String(), "longer than 512 bytes"); n != 1 {
		t.Errorf("the long topics were logged %d times, want once (by their common start):\n%.2000s", n, logged.String())
	}
}

// Unmatched topics are logged once each an hour: past the 1024 remembered,
// a new one is logged when the hour is up, as is an old one again.
func TestListenLogsUnmatchedTopicsAgainEachHour(t *testing.T) {
	var logged framework.LogLines
	now := time.Unix(1000, 0)
	var clockMu sync.Mutex
	sub := &Subscriber{Log: logged.Logger()}
	sub.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	_, addr := listening(t, sub, pod("a", "10.0.0.1", 8000, 0))
	p := connectPub(t, sub, addr, 1)
	seq := uint64(0)
	strays := func(topics ...string) {
		t.Helper()
		want := sub.strayBatches.Load() + int64(len(topics))
		for _, topic := range topics {
			send(p, topic, seq, 0, stored(1, prompt(1, 4, -1), 0, 4, ""))
			seq++
		}
		framework.Eventually(t, framework.Timeout, "the batches are counted as unmatched", func() error {
			if n := sub.strayBatches.Load(); n != want {
				return fmt.Errorf("%d unmatched batches, want %d", n, want)
			}
			return nil
		})
	}
	var many []string
	for i := range 1024 {
		many = append(many, fmt.Sprintf("kv@10.9.%d.%d@m", i/256, i%256))
	}
	strays(many...)
	strays("kv@10.8.0.1@m", "kv@10.9.0.0@m")
	for _, topic := range []string{"10.8.0.1", "10.9.0.0"} {
		if n := strings.Count(logged.String(), topic+"@"); n > 1 || (n == 1) != (topic == "10.9.0.0") {
			t.Errorf("before the hour: %s logged %d times", topic, n)
		}
	}
	clockMu.Lock()
	now = now.Add(time.Hour)
	clockMu.Unlock()
	strays("kv@10.8.0.1@m", "kv@10.9.0.0@m")
	for _, topic := range []string{"10.8.0.1", "10.9.0.0"} {
		if n, want := strings.Count(logged.String(), topic+"@"), map[string]int{"10.8.0.1": 1, "10.9.0.0": 2}[topic]; n != want {
			t.Errorf("an hour on: %s logged %d times, want %d", topic, n, want)
		}
	}
}

// A topic's port names that port's worker alone: a batch of a rank the
// port's worker does not follow is dropped, not given to the worker that
// follows that rank at another port of the pod.
func TestListenKeepsATopicToItsPort(t *testing.T) {
	sub := &Subscriber{}
	reg, addr := listening(t, sub, pod("ext", "10.0.0.1", 8000, 0), pod("ext", "10.0.0.1", 8001, 1))
	r0, r1 := workerAt(t, reg, "10.0.0.1:8000"), workerAt(t, reg, "10.0.0.1:8001")
	p := connectPub(t, sub, addr, 1)
	wrong, right := prompt(1, 4, -1), prompt(500, 4, -1)
	send(p, "kv@10.0.0.1:8001@m", 0, 0, stored(1, wrong, 0, 4, ""))
	send(p, "kv@10.0.0.1:8001@m", 1, 1, stored(2, right, 0, 4, ""))
	holders(t, sub.Index, "rank 1's prompt at its port", right, []Hold{{Worker: r1.ID(), Blocks: 4, Prompt: 4}})
	if got := sub.Index.Lookup(wrong, "", "", nil); len(got) != 0 {
		t.Errorf("rank 0's batch under port 8001: holders %+v, want none (rank 0 is worker %d's, at port 8000)", got, r0.ID())
	}
	if n := sub.strayBatches.Load(); n != 1 {
		t.Errorf("%d unmatched batches, want 1", n)
	}
}

// Two live connections publish under one pod's topic, as when a server
// reconnected while its old connection lingers: the later one's first batch
// replaces what the earlier one fed, the earlier one's further batches are
// dropped, and its end leaves the later one's blocks in place.
func TestListenALaterConnectionTakesThePodOver(t *testing.T) {
	sub := &Subscriber{}
	reg, addr := listening(t, sub, pod("a", "10.0.0.1", 8000, 0), pod("b", "10.0.0.2", 8000, 0))
	w, other := workerAt(t, reg, "10.0.0.1:8000"), workerAt(t, reg, "10.0.0.2:8000")
	early := connectPub(t, sub, addr, 1)
	first, second, stale, marker := prompt(1, 4, -1), prompt(500, 4, -1), prompt(900, 4, -1), prompt(1300, 2, -1)
	send(early, "kv@10.0.0.1@m", 0, 0, stored(1, first, 0, 4, ""))
	holders(t, sub.Index, "the earlier connection's prompt", first, []Hold{{Worker: w.ID(), Blocks: 4, Prompt: 4}})

	later := connectPub(t, sub, addr, 2)
	send(later, "kv@10.0.0.1@m", 0, 0, stored(2, second, 0, 4, ""))
	holders(t, sub.Index, "the later connection's prompt", second, []Hold{{Worker: w.ID(), Blocks: 4, Prompt: 4}})
	if got := sub.Index.Lookup(first, "", "", nil); len(got) != 0 {
		t.Errorf("the earlier connection's prompt once the later one feeds the pod: holders %+v, want none", got)
	}

	send(early, "kv@10.0.0.1@m", 1, 0, stored(3, stale, 0, 4, ""))
	// A batch for another pod after it: once applied, the one before was.
	send(early, "kv@10.0.0.2@m", 2, 0, stored(4, marker, 0, 2, ""))
	holders(t, sub.Index, "the marker", marker, []Hold{{Worker: other.ID(), Blocks: 2, Prompt: 2}})
	if got := sub.Index.Lookup(stale, "", "", nil); len(got) != 0 {
		t.Errorf("the earlier connection's batch after the later one's: holders %+v, want none", got)
	}

	_ = early.Close()
	framework.Eventually(t, framework.Timeout, "the earlier connection ends", func() error {
		if n := sub.Connected(); n != 1 {
			return fmt.Errorf("%d connected", n)
		}
		return nil
	})
	if diff := cmp.Diff([]Hold{{Worker: w.ID(), Blocks: 4, Prompt: 4}}, sub.Index.Lookup(second, "", "", nil)); diff != "" {
		t.Errorf("the later connection's prompt once the earlier one ended (-want +got):\n%s", diff)
	}
}

// What a connection fed is forgotten after a gap in its sequence numbers
// and when it ends; the connected count follows the connections.
func TestListenForgetsAfterAGapAndWhenTheConnectionEnds(t *testing.T) {
	sub := &Subscriber{}
	reg, addr := listening(t, sub, pod("a", "10.0.0.1", 8000, 0))
	w := workerAt(t, reg, "10.0.0.1:8000")
	p := connectPub(t, sub, addr, 1)
	before, after := prompt(1, 4, -1), prompt(500, 4, -1)

	send(p, "kv@10.0.0.1@m", 0, 0, stored(1, before, 0, 4, ""))
	holders(t, sub.Index, "the first batch's prompt", before, []Hold{{Worker: w.ID(), Blocks: 4, Prompt: 4}})
	send(p, "kv@10.0.0.1@m", 2, 0, stored(2, after, 0, 4, "")) // batch 1 missed
	holders(t, sub.Index, "the batch after the gap", after, []Hold{{Worker: w.ID(), Blocks: 4, Prompt: 4}})
	if got := sub.Index.Lookup(before, "", "", nil); len(got) != 0 {
		t.Errorf("the prompt before the gap: holders %+v, want none", got)
	}
	if n := sub.gaps.Load(); n != 1 {
		t.Errorf("%d gaps counted, want 1", n)
	}

	_ = p.Close()
	framework.Eventually(t, framework.Timeout, "the connection's blocks are forgotten when it ends", func() error {
		if n := sub.Connected(); n != 0 {
			return fmt.Errorf("%d connected", n)
		}
		if n := blocksHeld(sub.Index, w.ID()); n != 0 {
			return fmt.Errorf("%d blocks held", n)
		}
		return nil
	})
}

// A worker removed while its pod's publisher keeps sending holds nothing
// afterwards: no batch applied after the removal brings it back.
func TestListenLeavesNothingForARemovedWorker(t *testing.T) {
	sub := &Subscriber{}
	reg, addr := listening(t, sub, pod("gone", "10.0.0.1", 8000, 0), pod("kept", "10.0.0.2", 8000, 0))
	gone, kept := workerAt(t, reg, "10.0.0.1:8000"), workerAt(t, reg, "10.0.0.2:8000")
	p := connectPub(t, sub, addr, 1)
	tokens := prompt(1, 4, -1)
	send(p, "kv@10.0.0.1@m", 0, 0, stored(1, tokens, 0, 4, ""))
	holders(t, sub.Index, "the pod's prompt", tokens, []Hold{{Worker: gone.ID(), Blocks: 4, Prompt: 4}})

	stop := make(chan struct{})
	done := make(chan uint64)
	go func() { // the pod keeps publishing while it is removed
		seq := uint64(1)
		for {
			select {
			case <-stop:
				done <- seq
				return
			default:
			}
			send(p, "kv@10.0.0.1@m", seq, 0, stored(seq+1, prompt(uint32(seq)*100, 1, -1), 0, 1, ""))
			seq++
		}
	}()
	reg.Update(nil, []registry.Key{gone.Endpoint().Key})
	close(stop)
	seq := <-done
	// A batch for another pod after the last: once it is applied, every
	// earlier one was.
	marker := prompt(90000, 2, -1)
	send(p, "kv@10.0.0.2@m", seq, 0, stored(999, marker, 0, 2, ""))
	holders(t, sub.Index, "the marker", marker, []Hold{{Worker: kept.ID(), Blocks: 2, Prompt: 2}})

	sub.Index.mu.RLock()
	_, known := sub.Index.workers[gone.ID()]
	sub.Index.mu.RUnlock()
	if known {
		t.Errorf("the index keeps an entry for the removed worker (%d blocks)", blocksHeld(sub.Index, gone.ID()))
	}
}

func TestParseTopic(t *testing.T) {
	cases := map[string]struct {
		topic string
		want  podID
		ok    bool
	}{
		"IPv4":             {topic: "kv@10.1.2.3@meta-llama/Llama-3.1-8B", want: podID{addr: netip.MustParseAddr("10.1.2.3")}, ok: true},
		"IPv4 and port":    {topic: "kv@10.1.2.3:8000@m", want: podID{addr: netip.MustParseAddr("10.1.2.3"), port: 8000}, ok: true},
		"IPv6":             {topic: "kv@fd00::1@m", want: podID{addr: netip.MustParseAddr("fd00::1")}, ok: true},
		"IPv6 and port":    {topic: "kv@[fd00::1]:8000@m", want: podID{addr: netip.MustParseAddr("fd00::1"), port: 8000}, ok: true},
		"mapped IPv4":      {topic: "kv@::ffff:10.1.2.3@m", want: podID{addr: netip.MustParseAddr("10.1.2.3")}, ok: true},
		"empty model":      {topic: "kv@10.1.2.3@", want: podID{addr: netip.MustParseAddr("10.1.2.3")}, ok: true},
		"a pod name":       {topic: "kv@vllm-0@m"},
		"no model":         {topic: "kv@10.1.2.3"},
		"IPv6 in brackets": {topic: "kv@[fd00::1]@m", want: podID{addr: netip.MustParseAddr("fd00::1")}, ok: true},
		"'@' in the model": {topic: "kv@10.1.2.3@org@m", want: podID{addr: netip.MustParseAddr("10.1.2.3")}, ok: true},
		"IPv4 in brackets": {topic: "kv@[10.1.2.3]@m"},
		"empty brackets":   {topic: "kv@[]@m"},
		"port 0":           {topic: "kv@10.1.2.3:0@m"},
		"zone":             {topic: "kv@fe80::1%eth0@m"},
		"empty":            {topic: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := parseTopic(tc.topic)
			if ok != tc.ok || got != tc.want {
				t.Errorf("parseTopic(%q) = %+v, %v; want %+v, %v", tc.topic, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzParseTopic: parseTopic never panics, and a pod it reads names an
// unmapped address that the topic spells.
func FuzzParseTopic(f *testing.F) {
	for _, s := range []string{"kv@10.1.2.3@m", "kv@[fd00::1]:8000@m", "kv@::ffff:1.2.3.4@m", "kv@@", "@@@", "kv@1.2.3.4:99999@m", "kv@[fd00::1]@m", "kv@[::ffff:1.2.3.4]@a@b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		pod, ok := parseTopic(topic)
		if !ok {
			if pod != (podID{}) {
				t.Errorf("parseTopic(%q) failed but returned %+v", topic, pod)
			}
			return
		}
		if !pod.addr.IsValid() || pod.addr.Is4In6() {
			t.Errorf("parseTopic(%q) = %+v: not an unmapped address", topic, pod)
		}
		if strings.Count(topic, "@") < 2 {
			t.Errorf("parseTopic(%q) read a pod from a topic of fewer than three parts", topic)
		}
	})
}

// Applying a connected publisher's first batch for a worker (which takes
// the write lock to start feeding it) while the worker is removed never
// leaves the worker in the index, whichever comes first.
func TestListenApplyRacesRemoval(t *testing.T) {
	sub := &Subscriber{Index: New(0), Listen: "unused"}
	reg := registry.New()
	reg.AddListener(sub)
	tokens := prompt(1, 1, -1)
	for i := range 2000 {
		ep := pod(fmt.Sprint("pod-", i), "10.0.0.1", 8000, 0)
		reg.Update([]registry.Endpoint{ep}, nil)
		w := workerAt(t, reg, "10.0.0.1:8000")
		p := &publisher{s: sub, fed: map[engineKey]bool{}, pod: podID{addr: netip.MustParseAddr("10.0.0.1")}, podOK: true,
			batch: kvevents.Batch{Events: []kvevents.Event{stored(uint64(i), tokens, 0, 1, "")}}}
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; p.apply() })
		wg.Go(func() { <-start; reg.Update(nil, []registry.Key{ep.Key}) })
		close(start)
		wg.Wait()
		sub.Index.mu.RLock()
		_, known := sub.Index.workers[w.ID()]
		sub.Index.mu.RUnlock()
		if known {
			t.Fatalf("round %d: the index keeps the removed worker (%d blocks)", i, blocksHeld(sub.Index, w.ID()))
		}
	}
}

package kvindex

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/kvevents"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/framework"
)

// TestSubscriberFollowsEachRankOnItsPort serves one pod with two
// data-parallel ranks, as a pool with two target ports does: rank r
// publishes its events on the events port plus r, as vLLM does. Each
// rank's blocks must be found on that rank's worker only.
func TestSubscriberFollowsEachRankOnItsPort(t *testing.T) {
	const host = "127.0.0.150"
	pubs, ix, byRank := followPod(t, host, 2, 2)

	prompts := [][]uint32{prompt(1, 4, -1), prompt(500, 4, -1)}
	for rank, p := range pubs {
		framework.Eventually(t, framework.Timeout, fmt.Sprintf("rank %d's publisher has one subscriber, its rank's worker", rank), func() error {
			if n := p.Subscribers(); n != 1 {
				return fmt.Errorf("%d subscribers", n)
			}
			return nil
		})
		batch := kvevents.Batch{TS: 1, DPRank: rank, Events: []kvevents.Event{stored(uint64(rank+1), prompts[rank], 0, 4, "")}}
		p.Send([]byte("kv"), binary.BigEndian.AppendUint64(nil, 0), kvevents.AppendBatch(nil, &batch))
	}
	for rank, w := range byRank {
		framework.Eventually(t, framework.Timeout, fmt.Sprintf("rank %d's worker holds blocks", rank), func() error {
			if blocksHeld(ix, w.ID()) == 0 {
				return errors.New("none yet")
			}
			return nil
		})
	}
	for rank, tokens := range prompts {
		got := ix.Lookup(tokens, "", "", nil)
		want := []Hold{{Worker: byRank[rank].ID(), Blocks: 4, Prompt: 4}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("rank %d's prompt: holders (-want +got):\n%s", rank, diff)
		}
	}
}

// rankPubs listens for n ranks' events on host at consecutive ports, and
// returns the publishers and the first port.
func rankPubs(t *testing.T, host string, n int) ([]*kvevents.Pub, int) {
	t.Helper()
	for range 50 {
		first, err := kvevents.ListenPub(net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		base := first.Addr().(*net.TCPAddr).Port
		pubs := []*kvevents.Pub{first}
		for r := 1; r < n && base+r <= 65535; r++ {
			p, err := kvevents.ListenPub(net.JoinHostPort(host, strconv.Itoa(base+r)))
			if err != nil {
				break
			}
			pubs = append(pubs, p)
		}
		if len(pubs) == n {
			for _, p := range pubs {
				t.Cleanup(func() { _ = p.Close() })
			}
			return pubs, base
		}
		for _, p := range pubs {
			_ = p.Close()
		}
	}
	t.Fatalf("no %d consecutive free ports on %s", n, host)
	return nil, 0
}

// followPod serves n publishers on consecutive ports of host, and a
// subscriber, with the events port the first of them, following one pod at
// host whose ports are the first `ports` of its pool, of ranks 0, 1, ....
// It returns the publishers, the subscriber's index and the pod's workers
// by rank.
func followPod(t *testing.T, host string, n, ports int) ([]*kvevents.Pub, *Index, []*registry.Worker) {
	t.Helper()
	pubs, base := rankPubs(t, host, n)
	ix := New(0)
	sub := &Subscriber{Index: ix, Port: base, Backoff: 100 * time.Millisecond, EngineCheck: 10 * time.Millisecond}
	var eps []registry.Endpoint
	for rank := range ports {
		port := uint16(8000 + rank)
		eps = append(eps, registry.Endpoint{Key: registry.Key{UID: "pod", Port: int32(port)}, Name: "pod",
			Address: netip.AddrPortFrom(netip.MustParseAddr(host), port), Rank: rank})
	}
	reg := runSubscriber(t, sub, eps...)
	workers := make([]*registry.Worker, ports)
	for _, w := range reg.Workers() {
		workers[w.Endpoint().Rank] = w
	}
	return pubs, ix, workers
}

// runSubscriber starts sub until the test ends, listening to a registry
// of eps, and returns the registry.
func runSubscriber(t *testing.T, sub *Subscriber, eps ...registry.Endpoint) *registry.Registry {
	t.Helper()
	reg := registry.New()
	reg.AddListener(sub)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = sub.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	reg.Update(eps, nil)
	return reg
}

// TestSubscriberFollowsTheEnginesBehindOnePort serves one pod whose server
// fronts two data-parallel engines behind one API port, as vLLM's internal
// load balancer does: its metrics label two engines, and engine e publishes
// on the events port plus e. Both engines are followed for the one worker; a
// prompt one of them holds counts half, one both hold counts whole. When
// the server reports one engine again, the second is no longer followed
// and its blocks are forgotten.
func TestSubscriberFollowsTheEnginesBehindOnePort(t *testing.T) {
	const host = "127.0.0.151"
	pubs, ix, ws := followPod(t, host, 2, 1)
	w := ws[0]
	w.SetMetrics(&registry.Metrics{Engines: 1<<0 | 1<<1})

	one, other, both := prompt(1, 4, -1), prompt(500, 4, -1), prompt(900, 4, -1)
	for e, p := range pubs {
		framework.Eventually(t, framework.Timeout, fmt.Sprintf("engine %d's publisher has one subscriber", e), func() error {
			if n := p.Subscribers(); n != 1 {
				return fmt.Errorf("%d subscribers", n)
			}
			return nil
		})
		mine := [][]uint32{one, other}[e]
		batch := kvevents.Batch{TS: 1, DPRank: e, Events: []kvevents.Event{
			stored(uint64(e+1), mine, 0, 4, ""), stored(7, both, 0, 4, ""), // the same hashes on both engines
		}}
		p.Send([]byte("kv"), binary.BigEndian.AppendUint64(nil, 0), kvevents.AppendBatch(nil, &batch))
	}
	framework.Eventually(t, framework.Timeout, "both engines' blocks are held", func() error {
		if n := blocksHeld(ix, w.ID()); n != 16 {
			return fmt.Errorf("%d blocks held, want 16", n)
		}
		return nil
	})
	for name, tc := range map[string]struct {
		tokens []uint32
		want   []Hold
	}{
		"held by engine 0": {one, []Hold{{Worker: w.ID(), Blocks: 2, Prompt: 4}}},
		"held by engine 1": {other, []Hold{{Worker: w.ID(), Blocks: 2, Prompt: 4}}},
		"held by both":     {both, []Hold{{Worker: w.ID(), Blocks: 4, Prompt: 4}}},
	} {
		got := ix.Lookup(tc.tokens, "", "", nil)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: holders (-want +got):\n%s", name, diff)
		}
	}

	w.SetMetrics(&registry.Metrics{Engines: 1 << 0})
	framework.Eventually(t, framework.Timeout, "engine 1 is no longer followed and its blocks are forgotten", func() error {
		if n := pubs[1].Subscribers(); n != 0 {
			return fmt.Errorf("engine 1's publisher has %d subscribers", n)
		}
		if n := blocksHeld(ix, w.ID()); n != 8 {
			return fmt.Errorf("%d blocks held, want engine 0's 8", n)
		}
		return nil
	})
	if got := ix.Lookup(other, "", "", nil); len(got) != 0 {
		t.Errorf("engine 1's prompt after it left: holders %+v, want none", got)
	}
	if got := ix.Lookup(one, "", "", nil); !cmp.Equal(got, []Hold{{Worker: w.ID(), Blocks: 4, Prompt: 4}}) {
		t.Errorf("engine 0's prompt with one engine left: holders %+v, want the whole of it", got)
	}
}

// TestSubscriberFollowsANodesEngines serves one pod of a deployment whose
// data-parallel ranks span nodes, each node's API port fronting its own
// engines (vLLM's hybrid load balancer): this one runs ranks 2 and 3, labels
// its metrics with them and publishes on the events port plus 2 and plus 3.
// Those two are followed, and engine 0's port, where nothing of this node
// publishes, is no longer dialled once the metrics have named them.
func TestSubscriberFollowsANodesEngines(t *testing.T) {
	const host = "127.0.0.152"
	pubs, ix, ws := followPod(t, host, 4, 1)
	w := ws[0]
	framework.Eventually(t, framework.Timeout, "engine 0 is followed before the metrics name the engines", func() error {
		if n := pubs[0].Subscribers(); n != 1 {
			return fmt.Errorf("engine 0's publisher has %d subscribers", n)
		}
		return nil
	})
	w.SetMetrics(&registry.Metrics{Engines: 1<<2 | 1<<3})
	waitFollowed(t, pubs, 1<<2|1<<3)

	two, three := prompt(1, 4, -1), prompt(500, 4, -1)
	for e, mine := range map[int][]uint32{2: two, 3: three} {
		batch := kvevents.Batch{TS: 1, DPRank: e, Events: []kvevents.Event{stored(uint64(e), mine, 0, 4, "")}}
		pubs[e].Send([]byte("kv"), binary.BigEndian.AppendUint64(nil, 0), kvevents.AppendBatch(nil, &batch))
	}
	framework.Eventually(t, framework.Timeout, "both engines' blocks are held", func() error {
		if n := blocksHeld(ix, w.ID()); n != 8 {
			return fmt.Errorf("%d blocks held, want 8", n)
		}
		return nil
	})
	for name, tokens := range map[string][]uint32{"held by engine 2": two, "held by engine 3": three} {
		got := ix.Lookup(tokens, "", "", nil)
		if want := []Hold{{Worker: w.ID(), Blocks: 2, Prompt: 4}}; !cmp.Equal(got, want) {
			t.Errorf("%s: holders %+v, want %+v (half of the prompt: one of the two engines holds it)", name, got, want)
		}
	}
}

// TestWanted: a port is followed at its rank until its server names its
// engines, then at the ranks it names, unless a later port's server names
// engine 0 alone.
func TestWanted(t *testing.T) {
	for name, tc := range map[string]struct {
		rank int
		m    *registry.Metrics
		want []int
	}{
		"first port, not scraped yet":              {0, nil, []int{0}},
		"first port, no engine label":              {0, &registry.Metrics{}, []int{0}},
		"internal balancer":                        {0, &registry.Metrics{Engines: 0b1111}, []int{0, 1, 2, 3}},
		"hybrid balancer, second node":             {0, &registry.Metrics{Engines: 0b1100}, []int{2, 3}},
		"later port, not scraped yet":              {2, nil, []int{2}},
		"external balancer, first node":            {2, &registry.Metrics{Engines: 1 << 2}, []int{2}},
		"external balancer, second node":           {1, &registry.Metrics{Engines: 1 << 5}, []int{5}},
		"later port whose server names engine 0":   {1, &registry.Metrics{Engines: 1}, []int{1}},
		"later port whose server names no engine":  {1, &registry.Metrics{}, []int{1}},
		"a rank past the engines the index tracks": {MaxEngines, nil, []int{}},
	} {
		if got := wanted(tc.rank, tc.m).List(); !cmp.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

// TestReachable checks that an engine is followed only where its events
// port exists: with the events port near the last, the ranks past it are
// dropped.
func TestReachable(t *testing.T) {
	all := ^registry.Engines(0)
	for _, tc := range []struct {
		port int
		want registry.Engines
	}{
		{5557, all},
		{math.MaxUint16 - MaxEngines + 1, all},
		{math.MaxUint16 - MaxEngines + 2, all &^ (1 << 63)},
		{math.MaxUint16 - 2, 0b111},
		{math.MaxUint16, 0b1},
		{math.MaxUint16 + 1, 0},
	} {
		if got := reachable(tc.port); got != tc.want {
			t.Errorf("port %d: engines %v, want %v", tc.port, got.List(), tc.want.List())
		}
	}
}

// TestSubscriberFollowsAnExternalRankByItsLabel serves the second node of a
// deployment whose every rank has its own API port (vLLM's external load
// balancer, four ranks a node): the pod's ports 0 and 1 in the pool serve
// ranks 4 and 5, label their metrics with them and publish on the events
// port plus 4 and plus 5, where they are followed once their metrics are
// read.
func TestSubscriberFollowsAnExternalRankByItsLabel(t *testing.T) {
	const host = "127.0.0.153"
	pubs, _, ws := followPod(t, host, 6, 2)
	for place, w := range ws {
		w.SetMetrics(&registry.Metrics{Engines: 1 << (4 + place)})
	}
	waitFollowed(t, pubs, 1<<4|1<<5)
}

// waitFollowed waits until the publishers of the ranks in want have one
// subscriber each and the others none.
func waitFollowed(t *testing.T, pubs []*kvevents.Pub, want registry.Engines) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("ranks %v are followed, and no others", want.List()), func() error {
		for e, p := range pubs {
			n, w := p.Subscribers(), 0
			if want.Has(e) {
				w = 1
			}
			if n != w {
				return fmt.Errorf("rank %d's publisher has %d subscribers, want %d", e, n, w)
			}
		}
		return nil
	})
}

// A server whose events port accepts a connection and then says nothing (a
// frozen process, a proxy whose backend is gone) is dialled again after
// DialTimeout, and its events reach the index over the next connection.
func TestSubscriberDialsAgainPastASilentHandshake(t *testing.T) {
	const host = "127.0.0.164"
	pub, err := kvevents.ListenPub(net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int64
	go func() { // the first connection is held silent, the next ones reach pub
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
			if accepted.Add(1) == 1 {
				continue
			}
			up, err := net.Dial("tcp", pub.Addr().String())
			if err != nil {
				_ = c.Close()
				continue
			}
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	ix := New(0)
	sub := &Subscriber{Index: ix, Port: ln.Addr().(*net.TCPAddr).Port, Backoff: 100 * time.Millisecond, DialTimeout: 200 * time.Millisecond}
	reg := runSubscriber(t, sub, registry.Endpoint{Key: registry.Key{UID: "pod", Port: 8000}, Name: "pod",
		Address: netip.AddrPortFrom(netip.MustParseAddr(host), 8000)})
	w := reg.Workers()[0]
	batch := kvevents.AppendBatch(nil, &kvevents.Batch{TS: 1, Events: []kvevents.Event{stored(1, prompt(1, 4, -1), 0, 4, "")}})
	seq := uint64(0)
	framework.Eventually(t, framework.Timeout, "the events reach the index past the silent connection", func() error {
		seq++ // a PUB socket drops what it sends with no subscriber: sent again on each look
		pub.Send([]byte("kv"), binary.BigEndian.AppendUint64(nil, seq), batch)
		if n := blocksHeld(ix, w.ID()); n == 0 {
			return fmt.Errorf("%d connections accepted, no blocks held", accepted.Load())
		}
		return nil
	})
}

// The decoded batch a stream reuses keeps room for a step's events, not for
// the most an outsized batch made it hold: in its events' hashes, in its
// list of events (a batch of many events with no hashes), or in their extra
// keys.
func TestAStreamDoesNotKeepAnOutsizedBatch(t *testing.T) {
	manyExtra := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: bs, Medium: "GPU"}
	for i := range maxKeptBatch / int(unsafe.Sizeof(kvevents.ExtraKeys{})) {
		manyExtra.Extra = append(manyExtra.Extra, kvevents.ExtraKeys{Block: i, N: 1, Raw: []byte{0x01}})
	}
	cases := map[string][]kvevents.Event{
		"one event of many hashes": {{Kind: kvevents.BlockRemoved, Hashes: make([]uint64, maxKeptBatch/8+1)}},
		"many events of no hashes": slices.Repeat([]kvevents.Event{{Kind: kvevents.AllBlocksCleared}},
			maxKeptBatch/int(unsafe.Sizeof(kvevents.Event{}))+1),
		"one event of many blocks' extra keys": {manyExtra},
	}
	for name, big := range cases {
		t.Run(name, func(t *testing.T) {
			st := &stream{s: &Subscriber{Index: New(0)}, log: logr.Discard()}
			st.apply(0, kvevents.AppendBatch(nil, &kvevents.Batch{TS: 1, Events: big}))
			if n, c := retained(&st.batch, maxKeptBatch), cap(st.batch.Events); n != 0 || c != 0 {
				t.Errorf("after an outsized batch the stream keeps %d bytes, room for %d events", n, c)
			}
			small := stored(1, prompt(1, 4, -1), 0, 4, "")
			st.apply(1, kvevents.AppendBatch(nil, &kvevents.Batch{TS: 1, Events: []kvevents.Event{small}}))
			if n := retained(&st.batch, maxKeptBatch); n == 0 || n > maxKeptBatch {
				t.Errorf("after an ordinary batch the stream keeps %d bytes, want it kept for the next", n)
			}
		})
	}
}

package kvindex

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/kvevents"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/framework"
)

// server is one engine's publisher as vLLM runs it with a replay endpoint:
// every batch it publishes it also keeps, up to keep of them.
type server struct {
	pub    *kvevents.Pub
	replay *kvevents.Replayer
	seq    uint64
	keeps  bool // false: the replay endpoint answers, but keeps nothing
}

func startServer(t *testing.T, host string, keep int) *server {
	t.Helper()
	pub, err := kvevents.ListenPub(net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	replay, err := kvevents.ListenReplay(net.JoinHostPort(host, "0"), keep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replay.Close() })
	return &server{pub: pub, replay: replay, keeps: true}
}

// publish keeps the next batch of events and, unless lost, sends it to
// the subscribers.
func (s *server) publish(lost bool, events ...kvevents.Event) {
	b := kvevents.AppendBatch(nil, &kvevents.Batch{TS: 1, Events: events})
	if s.keeps {
		s.replay.Record(s.seq, b)
	}
	if !lost {
		s.pub.Send([]byte("kv"), binary.BigEndian.AppendUint64(nil, s.seq), b)
	}
	s.seq++
}

// follow starts a subscriber of the server's events, with its replay
// endpoint when replay is set, for one worker at host.
func (s *server) follow(t *testing.T, host string, replay bool) (*Index, *registry.Worker, *Subscriber) {
	t.Helper()
	ix := New(0)
	sub := &Subscriber{Index: ix, Port: s.pub.Addr().(*net.TCPAddr).Port, Backoff: 100 * time.Millisecond}
	if replay {
		sub.ReplayPort = s.replay.Addr().(*net.TCPAddr).Port
	}
	reg := runSubscriber(t, sub, registry.Endpoint{Key: registry.Key{UID: "pod", Port: 8000}, Name: "pod",
		Address: netip.AddrPortFrom(netip.MustParseAddr(host), 8000)})
	framework.Eventually(t, framework.Timeout, "the subscriber is connected", func() error {
		if n := s.pub.Subscribers(); n != 1 {
			return fmt.Errorf("%d subscribers", n)
		}
		return nil
	})
	return ix, reg.Workers()[0], sub
}

// holds returns, for each prompt, how many of its blocks the index has
// on w.
func holds(ix *Index, w *registry.Worker, prompts ...[]uint32) []int {
	out := make([]int, len(prompts))
	for i, p := range prompts {
		hs := ix.Lookup(p, "", "", nil)
		for _, h := range hs {
			if h.Worker == w.ID() {
				out[i] = h.Blocks
			}
		}
	}
	return out
}

// waitHolds waits until the index holds want blocks of each prompt on w.
func waitHolds(t *testing.T, ix *Index, w *registry.Worker, want []int, prompts ...[]uint32) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("the index holds %v blocks of the prompts", want), func() error {
		if got := holds(ix, w, prompts...); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("it holds %v", got)
		}
		return nil
	})
}

// TestSubscriberStartsFromTheKeptBatches: a picker that connects to a
// server after it published learns, from its replay endpoint, what the
// server's cache holds now; without replay it knows only later batches.
func TestSubscriberStartsFromTheKeptBatches(t *testing.T) {
	a, b, c := prompt(1, 4, -1), prompt(300, 4, -1), prompt(600, 4, -1)
	for _, replay := range []bool{true, false} {
		t.Run(fmt.Sprintf("replay=%v", replay), func(t *testing.T) {
			s := startServer(t, "127.0.0.152", 100)
			s.publish(true, stored(1, a, 0, 4, ""))
			s.publish(true, stored(2, b, 0, 4, ""))
			s.publish(true, removed(1000, 1001, 1002, 1003))
			ix, w, _ := s.follow(t, "127.0.0.152", replay)
			s.publish(false, stored(3, c, 0, 4, ""))
			want := []int{0, 0, 4}
			if replay {
				want = []int{0, 4, 4}
			}
			waitHolds(t, ix, w, want, a, b, c)
		})
	}
}

// TestSubscriberFillsAGapFromTheReplay: a batch the subscriber missed is
// read from the replay endpoint, and what it knew before stays known.
// Without replay, or when the server no longer keeps the missed batch, the
// engine's blocks are forgotten and only what comes after is known.
func TestSubscriberFillsAGapFromTheReplay(t *testing.T) {
	a, b, c := prompt(1, 4, -1), prompt(300, 4, -1), prompt(600, 4, -1)
	cases := map[string]struct {
		replay bool
		keep   int
		want   []int
		// replays by result (whole, truncated, failed): the one on
		// connecting, then the gap's.
		replays [replayResults]int64
	}{
		"replay":            {replay: true, keep: 100, want: []int{4, 4, 4}, replays: [replayResults]int64{2, 0, 0}},
		"no-replay":         {replay: false, keep: 100, want: []int{0, 0, 4}},
		"missed-not-kept":   {replay: true, keep: 1, want: []int{0, 0, 4}, replays: [replayResults]int64{1, 1, 0}},
		"missed-kept-ahead": {replay: true, keep: 2, want: []int{4, 4, 4}, replays: [replayResults]int64{2, 0, 0}},
		"nothing-kept":      {replay: true, keep: 0, want: []int{0, 0, 4}, replays: [replayResults]int64{1, 1, 0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := startServer(t, "127.0.0.153", tc.keep)
			s.keeps = tc.keep > 0
			ix, w, sub := s.follow(t, "127.0.0.153", tc.replay)
			s.publish(false, stored(1, a, 0, 4, ""))
			waitHolds(t, ix, w, []int{4, 0, 0}, a, b, c)
			s.publish(true, stored(2, b, 0, 4, ""))
			s.publish(false, stored(3, c, 0, 4, ""))
			waitHolds(t, ix, w, tc.want, a, b, c)
			var got [replayResults]int64
			for i := range got {
				got[i] = sub.replays[i].Load()
			}
			if got != tc.replays || sub.gaps.Load() != 1 {
				t.Errorf("replays %v and %d gaps, want %v and 1", got, sub.gaps.Load(), tc.replays)
			}
		})
	}
}

// BenchmarkCatchUp is what a subscriber spends, on connecting, reading
// the batches an engine keeps and applying them to a fresh index: a
// replayer on loopback keeping n batches, each one prefill step of a new
// 2,048-token prompt (a BlockStored of 128 blocks of 16 tokens) that
// evicts the prompt stored 16 steps before (a BlockRemoved of its 128
// blocks), as a server with a cache of 2,048 blocks publishes them.
func BenchmarkCatchUp(b *testing.B) {
	const blocks, resident = 128, 16
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("batches=%d", n), func(b *testing.B) {
			r, err := kvevents.ListenReplay("127.0.0.1:0", n)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			bytes := 0
			for i := range n {
				p := uint64(i + 1)
				evs := []kvevents.Event{stored(p, prompt(uint32(i)*blocks*bs, blocks, -1), 0, blocks, "")}
				if i >= resident {
					old := make([]uint64, blocks)
					for j := range old {
						old[j] = (p-resident)*1000 + uint64(j)
					}
					evs = append([]kvevents.Event{removed(old...)}, evs...)
				}
				msg := kvevents.AppendBatch(nil, &kvevents.Batch{TS: 1, Events: evs})
				bytes += len(msg)
				r.Record(uint64(i), msg)
			}
			addr := r.Addr().String()
			b.SetBytes(int64(bytes))
			b.ReportAllocs()
			for b.Loop() {
				ix := New(0)
				st := &stream{s: &Subscriber{Index: ix, ReplayTimeout: time.Minute}, id: 1, replay: addr}
				st.catchUp(b.Context())
				if st.next != uint64(n) || blocksHeld(ix, 1) != resident*blocks {
					b.Fatalf("caught up to %d with %d blocks held, want %d with %d", st.next, blocksHeld(ix, 1), n, resident*blocks)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/batch")
		})
	}
}

// gate stands in front of a replay endpoint on several hosts: it counts
// the connections and holds each until the test releases it, and records
// the most held at once.
type gate struct {
	release        chan struct{}
	accepted, held atomic.Int64
	peak           atomic.Int64
	onAccept       func() // when set, called on each connection
}

func (g *gate) listen(t *testing.T, addr, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.accepted.Add(1)
			if g.onAccept != nil {
				g.onAccept()
			}
			n := g.held.Add(1)
			for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
			}
			go func() {
				defer c.Close()
				select {
				case <-g.release:
					g.held.Add(-1)
				case <-t.Context().Done():
					return
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
}

// TestReplaysWaitForASlot: three pods' replays on connecting, with one
// slot, are read one after the other; with three, at once.
func TestReplaysWaitForASlot(t *testing.T) {
	for _, slots := range []int{1, 3} {
		t.Run(fmt.Sprintf("slots=%d", slots), func(t *testing.T) {
			hosts := framework.Loopback(154+3*(slots/3), 3)
			pubPort, replayPort := framework.FreePortT(t, hosts...), framework.FreePortT(t, hosts...)
			target := startServer(t, "127.0.0.1", 10).replay.Addr().String()
			g := &gate{release: make(chan struct{})}
			var eps []registry.Endpoint
			for i, h := range hosts {
				pub, err := kvevents.ListenPub(net.JoinHostPort(h, strconv.Itoa(pubPort)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = pub.Close() })
				g.listen(t, net.JoinHostPort(h, strconv.Itoa(replayPort)), target)
				eps = append(eps, registry.Endpoint{Key: registry.Key{UID: h, Port: 8000}, Name: fmt.Sprint("pod-", i),
					Address: netip.AddrPortFrom(netip.MustParseAddr(h), 8000)})
			}
			sub := &Subscriber{Index: New(0), Port: pubPort, ReplayPort: replayPort, ReplaySlots: slots,
				ReplayTimeout: time.Minute, Backoff: 100 * time.Millisecond}
			runSubscriber(t, sub, eps...)

			for released := range 3 {
				want := min(released+slots, 3)
				framework.Eventually(t, framework.Timeout, fmt.Sprintf("%d replays begun", want), func() error {
					if n := g.accepted.Load(); n != int64(want) {
						return fmt.Errorf("%d begun", n)
					}
					return nil
				})
				g.release <- struct{}{}
			}
			framework.Eventually(t, framework.Timeout, "every replay done", func() error {
				if n := sub.replays[replayWhole].Load(); n != 3 {
					return fmt.Errorf("%d whole", n)
				}
				return nil
			})
			if p := g.peak.Load(); p != int64(slots) {
				t.Errorf("%d replays begun at once, want %d", p, slots)
			}
		})
	}
}

// TestAReplayPastItsTimeoutFails: a replay endpoint that takes the request
// and never answers. Past the replay timeout the replay counts as failed
// and the engine's blocks are forgotten, since what it missed is unknown; a
// replay cut short because its stream ends (the worker left, or the picker
// stops) is no failure of the endpoint's and is not counted.
func TestAReplayPastItsTimeoutFails(t *testing.T) {
	host := framework.Loopback(160, 1)[0]
	addr := net.JoinHostPort(host, strconv.Itoa(framework.FreePortT(t, host)))
	accepted := make(chan struct{}, 2)
	g := &gate{release: make(chan struct{}), onAccept: func() { accepted <- struct{}{} }} // never released
	g.listen(t, addr, startServer(t, "127.0.0.1", 10).replay.Addr().String())
	a := prompt(1, 4, -1)

	// follows is an engine that applied a's blocks and then missed batches.
	follows := func(timeout time.Duration) (*Index, *stream) {
		ix := New(0)
		ix.Apply(1, []kvevents.Event{stored(1, a, 0, 4, "")})
		return ix, &stream{s: &Subscriber{Index: ix, ReplayTimeout: timeout}, id: 1, replay: addr, begun: true, next: 3}
	}
	results := func(s *Subscriber) (got [replayResults]int64) {
		for i := range got {
			got[i] = s.replays[i].Load()
		}
		return got
	}

	ix, st := follows(50 * time.Millisecond)
	st.catchUp(t.Context())
	if got := results(st.s); got != [replayResults]int64{0, 0, 1} {
		t.Errorf("past the timeout: replays by result %v, want one failed", got)
	}
	if n := blocksHeld(ix, 1); n != 0 {
		t.Errorf("past the timeout: %d blocks still held, want the engine's blocks forgotten", n)
	}

	_, st = follows(time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-accepted
		cancel()
	}()
	st.catchUp(ctx)
	if got := results(st.s); got != [replayResults]int64{} {
		t.Errorf("stream ended during the replay: replays by result %v, want none counted", got)
	}
}

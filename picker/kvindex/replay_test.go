package kvindex

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
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
	reg := registry.New()
	reg.AddListener(sub)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = sub.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	reg.Update([]registry.Endpoint{{Key: registry.Key{UID: "pod", Port: 8000}, Name: "pod",
		Address: netip.AddrPortFrom(netip.MustParseAddr(host), 8000)}}, nil)
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
		hs, _ := ix.Lookup(p, "", "", nil)
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
			if got != tc.replays || sub.Gaps() != 1 {
				t.Errorf("replays %v and %d gaps, want %v and 1", got, sub.Gaps(), tc.replays)
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
				if st.next != uint64(n) || ix.Held(1) != resident*blocks {
					b.Fatalf("caught up to %d with %d blocks held, want %d with %d", st.next, ix.Held(1), n, resident*blocks)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/batch")
		})
	}
}

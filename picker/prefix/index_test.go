package prefix

import (
	"bytes"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// text returns n deterministic bytes that differ from those of any other tag.
func text(tag byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte((i*7+int(tag)*13)%26)
	}
	if n > 0 {
		b[0] = tag
	}
	return b
}

func TestHashesIgnoreSegmentBoundaries(t *testing.T) {
	ix := New()
	whole := text('x', 1000)
	want := ix.Hashes(nil, "m", "", [][]byte{whole})
	if len(want) != 1000/BlockSize {
		t.Fatalf("got %d hashes for 1000 bytes, want %d", len(want), 1000/BlockSize)
	}
	cases := map[string][][]byte{
		"two halves":      {whole[:500], whole[500:]},
		"block aligned":   {whole[:128], whole[128:]},
		"tiny pieces":     {whole[:1], whole[1:3], whole[3:70], {}, whole[70:130], whole[130:]},
		"empty segments":  {{}, whole, {}},
		"one byte pieces": splitEvery(whole, 1),
		"odd pieces":      splitEvery(whole, 37),
	}
	for name, prompt := range cases {
		t.Run(name, func(t *testing.T) {
			got := ix.Hashes(nil, "m", "", prompt)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("hashes (-want +got):\n%s", diff)
			}
		})
	}
}

func splitEvery(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

func TestHashesShareExactlyTheCommonPrefix(t *testing.T) {
	ix := New()
	a := text('p', 640)
	b := bytes.Clone(a)
	b[200] ^= 1 // differs inside block 3
	ha := ix.Hashes(nil, "m", "", [][]byte{a})
	hb := ix.Hashes(nil, "m", "", [][]byte{b})
	for i := range ha {
		if same := ha[i] == hb[i]; same != (i < 3) {
			t.Errorf("block %d: shared = %v, want %v", i, same, i < 3)
		}
	}
}

func TestHashesSeparateModelsAndSalts(t *testing.T) {
	ix := New()
	p := [][]byte{text('s', 256)}
	base := ix.Hashes(nil, "m", "", p)
	others := map[string][]uint64{
		"other model":      ix.Hashes(nil, "m2", "", p),
		"salt":             ix.Hashes(nil, "m", "salt", p),
		"model/salt shift": ix.Hashes(nil, "", "m", p),
		"other index":      New().Hashes(nil, "m", "", p),
	}
	for name, hs := range others {
		for i := range hs {
			if hs[i] == base[i] {
				t.Errorf("%s: block %d shares a hash", name, i)
			}
		}
	}
}

func TestMatchLongestPrefixPerWorker(t *testing.T) {
	ix := New()
	for _, id := range []uint32{1, 2, 3} {
		ix.AddWorker(id)
	}
	sys := text('s', 5*BlockSize)
	prompt := [][]byte{sys, text('u', 5*BlockSize)}
	other := [][]byte{sys, text('v', 5*BlockSize)}
	ix.Insert(1, 0, ix.Hashes(nil, "m", "", prompt))
	ix.Insert(2, 0, ix.Hashes(nil, "m", "", other))
	ix.Insert(4, 0, ix.Hashes(nil, "m", "", prompt)) // never added: ignored

	var s Scratch
	got := sorted(ix.Match(ix.Hashes(nil, "m", "", prompt), &s))
	want := []Match{{Worker: 1, Blocks: 10}, {Worker: 2, Blocks: 5}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("match (-want +got):\n%s", diff)
	}
	if got := ix.Match(ix.Hashes(nil, "other", "", prompt), &s); len(got) != 0 {
		t.Errorf("other model matched %v", got)
	}

	ix.RemoveWorker(1)
	got = sorted(ix.Match(ix.Hashes(nil, "m", "", prompt), &s))
	want = []Match{{Worker: 2, Blocks: 5}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("match after removing worker 1 (-want +got):\n%s", diff)
	}
	if st := ix.Stats(); st.Entries != 10 || st.Blocks != 10 || st.Workers != 2 {
		t.Errorf("stats after removal = %+v, want 10 entries, 10 blocks, 2 workers", st)
	}
	ix.Insert(1, 0, ix.Hashes(nil, "m", "", prompt)) // removed: ignored
	if n := ix.WorkerBlocks(1); n != 0 {
		t.Errorf("removed worker holds %d blocks", n)
	}
}

// A worker pushed out of a widely shared head is still found by the blocks
// it holds alone: its conversation.
func TestMatchFindsWorkerPushedOutOfSharedHead(t *testing.T) {
	ix := New(WithMaxHolders(2))
	for id := uint32(1); id <= 3; id++ {
		ix.AddWorker(id)
	}
	sys := text('s', 10*BlockSize)
	conv := text('c', 20*BlockSize)
	ix.Insert(1, 0, ix.Hashes(nil, "m", "", [][]byte{sys, conv}))
	ix.Insert(2, 0, ix.Hashes(nil, "m", "", [][]byte{sys, text('x', 3*BlockSize)}))
	ix.Insert(3, 0, ix.Hashes(nil, "m", "", [][]byte{sys, text('y', 3*BlockSize)}))
	next := ix.Hashes(nil, "m", "", [][]byte{sys, conv, text('n', 5*BlockSize)})
	want := []Match{{Worker: 1, Blocks: 30}, {Worker: 2, Blocks: 10}, {Worker: 3, Blocks: 10}}
	if diff := cmp.Diff(want, sorted(ix.Match(next, &Scratch{}))); diff != "" {
		t.Errorf("match (-want +got):\n%s", diff)
	}
}

func TestEvictionKeepsPromptHeads(t *testing.T) {
	ix := New(WithShards(1))
	ix.AddWorker(1)
	long := ix.Hashes(nil, "m", "", [][]byte{text('l', 8*BlockSize)})
	ix.Insert(1, 4, long)
	var s Scratch
	if diff := cmp.Diff([]Match{{Worker: 1, Blocks: 4}}, ix.Match(long, &s)); diff != "" {
		t.Errorf("a prompt longer than the capacity keeps its head (-want +got):\n%s", diff)
	}

	a := ix.Hashes(nil, "m", "", [][]byte{text('a', 2*BlockSize)})
	b := ix.Hashes(nil, "m", "", [][]byte{text('b', 2*BlockSize)})
	c := ix.Hashes(nil, "m", "", [][]byte{text('c', 2*BlockSize)})
	ix.Insert(1, 4, a)
	ix.Insert(1, 4, b)
	ix.Insert(1, 4, a) // a is now more recent than b
	ix.Insert(1, 4, c) // evicts b
	for name, tc := range map[string]struct {
		hs   []uint64
		want int
	}{"a": {a, 2}, "b": {b, 0}, "c": {c, 2}, "long": {long, 0}} {
		got := 0
		if m := ix.Match(tc.hs, &s); len(m) > 0 {
			got = m[0].Blocks
		}
		if got != tc.want {
			t.Errorf("%s: matched %d blocks, want %d", name, got, tc.want)
		}
	}
	if n := ix.WorkerBlocks(1); n != 4 {
		t.Errorf("worker holds %d blocks, want its capacity 4", n)
	}
}

func TestStatsHitRatio(t *testing.T) {
	ix := New()
	ix.AddWorker(1)
	hs := ix.Hashes(nil, "m", "", [][]byte{text('h', 4*BlockSize)})
	ix.Insert(1, 0, hs[:2])
	ix.Match(hs, &Scratch{})
	if got := ix.Stats().HitRatio(); got != 0.5 {
		t.Errorf("hit ratio = %v, want 0.5", got)
	}
}

func sorted(m []Match) []Match {
	m = slices.Clone(m)
	slices.SortFunc(m, func(a, b Match) int { return int(a.Worker) - int(b.Worker) })
	return m
}

func TestBlocksRememberRecentHolders(t *testing.T) {
	ix := New(WithMaxHolders(2))
	for id := uint32(1); id <= 3; id++ {
		ix.AddWorker(id)
	}
	hs := ix.Hashes(nil, "m", "", [][]byte{text('r', 3*BlockSize)})
	ix.Insert(1, 0, hs)
	ix.Insert(2, 0, hs)
	ix.Insert(3, 0, hs) // pushes out 1
	want := []Match{{Worker: 2, Blocks: 3}, {Worker: 3, Blocks: 3}}
	if diff := cmp.Diff(want, sorted(ix.Match(hs, &Scratch{}))); diff != "" {
		t.Errorf("match (-want +got):\n%s", diff)
	}
	if n := ix.WorkerBlocks(1); n != 0 {
		t.Errorf("pushed-out worker still counts %d blocks", n)
	}
}

// Inserts and matches race with workers leaving; a removed worker never
// shows in a match that starts after its removal, and nothing it held stays.
func TestConcurrentUse(t *testing.T) {
	ix := New(WithShards(4), WithDefaultCapacity(256))
	for id := uint32(1); id <= 8; id++ {
		ix.AddWorker(id)
	}
	prompts := make([][]uint64, 16)
	for i := range prompts {
		prompts[i] = ix.Hashes(nil, "m", "", [][]byte{text('s', 512), text(byte('a'+i), 64*(i+1))})
	}
	var removed [9]atomic.Bool
	done := make(chan error, 4)
	for g := range 4 {
		go func() {
			var s Scratch
			for i := range 2000 {
				hs := prompts[(g+i)%len(prompts)]
				ix.Insert(uint32(i%8)+1, 0, hs)
				var gone [9]bool
				for id := range gone {
					gone[id] = removed[id].Load()
				}
				for _, m := range ix.Match(hs, &s) {
					if gone[m.Worker] {
						done <- fmt.Errorf("matched worker %d after its removal", m.Worker)
						return
					}
				}
			}
			done <- nil
		}()
	}
	for id := uint32(1); id <= 8; id += 2 {
		ix.RemoveWorker(id)
		removed[id].Store(true)
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	live := 0
	for id := uint32(2); id <= 8; id += 2 {
		live += ix.WorkerBlocks(id)
	}
	if st := ix.Stats(); st.Entries != live {
		t.Errorf("index keeps %d entries, live workers hold %d", st.Entries, live)
	}
}

package kvindex

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/kvevents"
)

const bs = 4 // tokens per block in these tests

// prompt returns n blocks of tokens; blocks of prompts with the same base
// are equal up to the first block where diverge starts (-1: never).
func prompt(base uint32, n, diverge int) []uint32 {
	t := make([]uint32, n*bs)
	for i := range t {
		t[i] = base + uint32(i)
		if diverge >= 0 && i >= diverge*bs {
			t[i] += 1 << 20
		}
	}
	return t
}

// stored is the event of blocks [from, to) of tokens, the server hashing
// block i of the prompt named p as p*1000+i.
func stored(p uint64, tokens []uint32, from, to int, adapter string) kvevents.Event {
	return storedSized(p, tokens, from, to, adapter, bs)
}

// storedSized is stored of a server that cuts the tokens in blocks of size.
func storedSized(p uint64, tokens []uint32, from, to int, adapter string, size int) kvevents.Event {
	ev := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: size, LoraName: adapter, Medium: "GPU"}
	for i := from; i < to; i++ {
		ev.Hashes = append(ev.Hashes, p*1000+uint64(i))
	}
	if from > 0 {
		ev.Parent, ev.HasParent = p*1000+uint64(from-1), true
	}
	ev.TokenIDs = tokens[from*size : to*size]
	return ev
}

// byLoraID is ev as a server that sends lora_id but no lora_name (vLLM
// releases before the field) publishes it for the adapter numbered id.
func byLoraID(ev kvevents.Event, id int64) kvevents.Event {
	ev.LoraID, ev.HasLora = id, true
	return ev
}

func removed(hashes ...uint64) kvevents.Event {
	return kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: hashes}
}

func sorted(h []Hold) []Hold {
	sort.Slice(h, func(i, j int) bool { return h[i].Worker < h[j].Worker })
	return h
}

func TestLookup(t *testing.T) {
	a := prompt(1, 6, -1)
	b := prompt(1, 6, 3) // shares a's first 3 blocks
	cases := map[string]struct {
		events  map[uint32][]kvevents.Event // applied by worker, workers in order
		tokens  []uint32
		adapter string
		want    []Hold
	}{
		"nothing stored": {
			tokens: a,
		},
		"one worker holds the whole prompt, stored in two events": {
			events: map[uint32][]kvevents.Event{1: {stored(1, a, 0, 2, ""), stored(1, a, 2, 6, "")}},
			tokens: a,
			want:   []Hold{{Worker: 1, Blocks: 6, Prompt: 6}},
		},
		"a shared prefix on one worker, the whole prompt on another": {
			events: map[uint32][]kvevents.Event{
				1: {stored(2, b, 0, 6, "")},
				2: {stored(1, a, 0, 6, "")},
			},
			tokens: a,
			want:   []Hold{{Worker: 1, Blocks: 3, Prompt: 6}, {Worker: 2, Blocks: 6, Prompt: 6}},
		},
		"a removed middle block ends the run there": {
			events: map[uint32][]kvevents.Event{1: {stored(1, a, 0, 6, ""), removed(1002)}},
			tokens: a,
			want:   []Hold{{Worker: 1, Blocks: 2, Prompt: 6}},
		},
		"an adapter's blocks are not the base model's": {
			events:  map[uint32][]kvevents.Event{1: {stored(1, a, 0, 6, "sql")}},
			tokens:  a,
			adapter: "",
		},
		"an adapter's blocks for the adapter": {
			events:  map[uint32][]kvevents.Event{1: {stored(1, a, 0, 6, "sql")}},
			tokens:  a,
			adapter: "sql",
			want:    []Hold{{Worker: 1, Blocks: 6, Prompt: 6}},
		},
		"an adapter's blocks from a server that names it by its number alone are not the base model's": {
			events: map[uint32][]kvevents.Event{1: {byLoraID(stored(1, a, 0, 6, ""), 7)}},
			tokens: a,
		},
		"blocks whose parent was never seen are not chained": {
			events: map[uint32][]kvevents.Event{1: {stored(1, a, 2, 6, "")}},
			tokens: a,
		},
		"cleared": {
			events: map[uint32][]kvevents.Event{1: {stored(1, a, 0, 6, ""), {Kind: kvevents.AllBlocksCleared}}},
			tokens: a,
		},
		"a partial last block is not looked up": {
			events: map[uint32][]kvevents.Event{1: {stored(1, a, 0, 6, "")}},
			tokens: a[:2*bs+1],
			want:   []Hold{{Worker: 1, Blocks: 2, Prompt: 2}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ix := New(0)
			for id := uint32(1); id <= 2; id++ {
				ix.Apply(id, tc.events[id])
			}
			got := ix.Lookup(tc.tokens, tc.adapter, "", nil)
			if len(got) == 0 {
				got = nil
			}
			if diff := cmp.Diff(tc.want, sorted(got)); diff != "" {
				t.Errorf("holds (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLookupOverManyHolders: past 16 engines holding a prompt's first
// block, each still gets its own run: 24 workers, the odd ones holding only
// the first two of its four blocks.
func TestLookupOverManyHolders(t *testing.T) {
	a := prompt(1, 4, -1)
	ix := New(0)
	var want []Hold
	for id := uint32(1); id <= 24; id++ {
		n := 4 - 2*int(id%2)
		ix.Apply(id, []kvevents.Event{stored(uint64(id), a, 0, n, "")})
		want = append(want, Hold{Worker: id, Blocks: n, Prompt: 4})
	}
	got := ix.Lookup(a, "", "", nil)
	if diff := cmp.Diff(want, sorted(got)); diff != "" {
		t.Errorf("holds (-want +got):\n%s", diff)
	}
}

// TestABlockHeldUnderTwoHashes: an engine may hold the same tokens after
// the same parent under two of its server's hashes, and another engine of
// the worker under a third. The block stays held by the first engine until
// both its hashes are removed, and the key is gone once every engine's are.
// A worker of one engine holding the prompt under two hashes is one hold.
func TestABlockHeldUnderTwoHashes(t *testing.T) {
	a := prompt(1, 4, -1)
	ix := New(0)
	ix.ApplyEngine(1, 0, []kvevents.Event{stored(1, a, 0, 4, ""), stored(2, a, 0, 4, "")})
	ix.ApplyEngine(1, 1, []kvevents.Event{stored(3, a, 0, 4, "")})
	ix.Apply(2, []kvevents.Event{stored(4, a, 0, 4, ""), stored(5, a, 0, 4, "")})
	hashes := func(p uint64) kvevents.Event { return removed(p*1000, p*1000+1, p*1000+2, p*1000+3) }
	steps := []struct {
		engine int
		remove uint64
		want   []Hold // the worker's mean over its two engines
		held   int
	}{
		{want: []Hold{{Worker: 1, Blocks: 4, Prompt: 4}, {Worker: 2, Blocks: 4, Prompt: 4}}, held: 12},
		{engine: 0, remove: 1, want: []Hold{{Worker: 1, Blocks: 4, Prompt: 4}, {Worker: 2, Blocks: 4, Prompt: 4}}, held: 8},
		{engine: 0, remove: 2, want: []Hold{{Worker: 1, Blocks: 2, Prompt: 4}, {Worker: 2, Blocks: 4, Prompt: 4}}, held: 4},
		{engine: 1, remove: 3, want: []Hold{{Worker: 2, Blocks: 4, Prompt: 4}}, held: 0},
	}
	for i, s := range steps {
		if s.remove != 0 {
			ix.ApplyEngine(1, s.engine, []kvevents.Event{hashes(s.remove)})
		}
		got := ix.Lookup(a, "", "", nil)
		if diff := cmp.Diff(s.want, sorted(got)); diff != "" || blocksHeld(ix, 1) != s.held {
			t.Errorf("step %d: %d blocks held (want %d), holds (-want +got):\n%s", i, blocksHeld(ix, 1), s.held, diff)
		}
	}
	ix.Remove(2)
	if ix.keys.n != 0 || ix.nodes.live != 0 {
		t.Errorf("after every removal: %d keys and %d nodes kept, want none", ix.keys.n, ix.nodes.live)
	}
}

// TestAHashRepeatedInOneStoreKeepsItsAdapterKnown: a stored event that
// names one hash for two different blocks (a colliding or hostile server)
// keeps the later block under it, and the adapter it was stored under stays
// known, its number counting the block, until the block goes.
func TestAHashRepeatedInOneStoreKeepsItsAdapterKnown(t *testing.T) {
	a := prompt(1, 2, -1)
	ix := New(0)
	ix.Apply(1, []kvevents.Event{{Kind: kvevents.BlockStored, BlockSize: bs, LoraName: "a", Medium: "GPU",
		Hashes: []uint64{7, 7}, TokenIDs: a}})
	if !ix.Adapter("a") {
		t.Error("adapter a unknown while a block stored under it is held")
	}
	checkAdapters(t, ix)
	ix.Apply(1, []kvevents.Event{stored(2, prompt(50, 1, -1), 0, 1, "b")}) // a new name takes a free number
	checkAdapters(t, ix)
	ix.Apply(1, []kvevents.Event{removed(7)})
	if ix.Adapter("a") || !ix.Adapter("b") {
		t.Errorf("after a's block went: Adapter(a) %v, Adapter(b) %v; want false, true", ix.Adapter("a"), ix.Adapter("b"))
	}
	checkAdapters(t, ix)
}

func TestRemoveForgetsAWorkerAndItsCounts(t *testing.T) {
	ix := New(0)
	a := prompt(1, 4, -1)
	ix.Apply(1, []kvevents.Event{stored(1, a, 0, 4, "sql")})
	ix.Apply(2, []kvevents.Event{stored(1, a, 0, 4, "sql")})
	if got := blocksHeld(ix, 1); got != 4 {
		t.Fatalf("Held(1) = %d, want 4", got)
	}
	ix.Remove(1)
	got := ix.Lookup(a, "sql", "", nil)
	if diff := cmp.Diff([]Hold{{Worker: 2, Blocks: 4, Prompt: 4}}, got); diff != "" {
		t.Errorf("after Remove(1): holds (-want +got):\n%s", diff)
	}
	if blocksHeld(ix, 1) != 0 || !ix.Adapter("sql") {
		t.Errorf("Held(1) = %d, Adapter(sql) = %v; want 0, true", blocksHeld(ix, 1), ix.Adapter("sql"))
	}
	ix.Remove(2)
	if n, _ := ix.Stats(); n != 0 || ix.Adapter("sql") || ix.keys.n != 0 {
		t.Errorf("after removing both: %d blocks, adapter known %v, %d keys; want none", n, ix.Adapter("sql"), ix.keys.n)
	}
}

func TestMalformedAndFullStoresAreDropped(t *testing.T) {
	ix := New(3)
	a := prompt(1, 4, -1)
	short := stored(1, a, 0, 2, "")
	short.TokenIDs = short.TokenIDs[:bs+1]
	ix.Apply(1, []kvevents.Event{short})
	ix.Apply(1, []kvevents.Event{stored(1, a, 0, 4, "")})
	ix.Apply(1, []kvevents.Event{storedSized(2, a, 0, 1, "", 2*bs)}) // not the engine's block size
	n, dropped := ix.Stats()
	if diff := cmp.Diff(Dropped{Malformed: 2, Full: 1}, dropped); diff != "" || n != 3 {
		t.Errorf("blocks %d (want 3), dropped (-want +got):\n%s", n, diff)
	}
}

// TestTheBoundHoldsForAPodOfManyEngines: a pod whose port fronts several
// data-parallel engines keeps at most the bound's blocks over them all,
// as it does with one engine; another pod has a bound of its own.
func TestTheBoundHoldsForAPodOfManyEngines(t *testing.T) {
	ix := New(4)
	for e := range 3 {
		ix.ApplyEngine(1, e, []kvevents.Event{stored(uint64(e+1), prompt(uint32(100*e), 4, -1), 0, 4, "")})
	}
	ix.Apply(2, []kvevents.Event{stored(9, prompt(1000, 4, -1), 0, 4, "")})
	if held := blocksHeld(ix, 1); held != 4 {
		t.Errorf("the pod of 3 engines holds %d blocks, want its bound of 4", held)
	}
	if held := blocksHeld(ix, 2); held != 4 {
		t.Errorf("another pod holds %d blocks, want its own bound of 4", held)
	}
	if _, d := ix.Stats(); d != (Dropped{Full: 8}) {
		t.Errorf("dropped %+v, want the 8 blocks over the first pod's bound", d)
	}
}

// TestSaltedPromptsAreKeptApart: a server that keys a salted prompt's first
// block by its salt (extra keys) holds it apart from the same tokens without
// a salt or under another, as vLLM's cache does; the blocks after the first
// chain from the salted one.
func TestSaltedPromptsAreKeptApart(t *testing.T) {
	ix := New(0)
	a := prompt(1, 4, -1)
	ix.Apply(1, []kvevents.Event{stored(1, a, 0, 4, "")})
	if ix.SaltKeyed() {
		t.Fatal("SaltKeyed before any block came with extra keys")
	}
	salted := stored(2, a, 0, 2, "sql")
	salted.Extra = []kvevents.ExtraKeys{kvevents.SaltKeys("tenant-a")}
	ix.Apply(2, []kvevents.Event{salted, stored(2, a, 2, 4, "sql")})
	plain := stored(3, a, 0, 4, "")
	plain.Extra = []kvevents.ExtraKeys{{Block: 1, N: 1, Raw: kvevents.SaltKeys("image").Raw}}
	ix.Apply(3, []kvevents.Event{plain})
	if !ix.SaltKeyed() {
		t.Fatal("not SaltKeyed after a salted block was stored")
	}
	cases := []struct {
		adapter, salt string
		want          []Hold
	}{
		{"", "", []Hold{{Worker: 1, Blocks: 4, Prompt: 4}, {Worker: 3, Blocks: 1, Prompt: 4}}}, // worker 3's second block has other keys
		{"sql", "tenant-a", []Hold{{Worker: 2, Blocks: 4, Prompt: 4}}},
		{"sql", "tenant-b", nil},
		{"", "tenant-a", nil},
		{"sql", "", nil},
	}
	for _, tc := range cases {
		got := ix.Lookup(a, tc.adapter, tc.salt, nil)
		if diff := cmp.Diff(tc.want, sorted(got)); diff != "" {
			t.Errorf("adapter %q salt %q: holds (-want +got):\n%s", tc.adapter, tc.salt, diff)
		}
	}
}

// BenchmarkEventIndexMemory reports the heap the index takes per block a
// worker holds: 16 workers each storing prompts of 128 blocks, every prompt
// held by one worker, or by two (the same tokens on two workers: one key,
// two holders). The parts of the index's tables double as they fill, so
// the cost per block depends on where the count falls between two
// doublings: at 51,200 blocks a worker the parts have just doubled (the
// most), at 65,536 they are half full, at 89,600 near the next doubling.
// Each prompt is stored as a batch of its own, and the
// longest batch is reported: the one whose store caught a table's growth.
// Then three pods in four leave, and what the blocks of those that stay
// cost once the index has shrunk is reported, with the longest batch
// while it shrank.
func BenchmarkEventIndexMemory(b *testing.B) {
	const workers, blocks = 16, 128
	for _, prompts := range []int{400, 512, 700} {
		for _, copies := range []int{1, 2} {
			b.Run(fmt.Sprintf("blocks=%d/holders=%d", workers*prompts*blocks, copies), func(b *testing.B) {
				batches := make([][]kvevents.Event, workers)
				for w := range workers {
					for p := range prompts {
						owner := w / copies * copies // the worker whose tokens this prompt has
						tokens := prompt(uint32(owner*prompts+p)*blocks*bs, blocks, -1)
						batches[w] = append(batches[w], stored(uint64(w*prompts+p), tokens, 0, blocks, ""))
					}
				}
				for b.Loop() {
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					ix := New(0)
					held := 0
					var slowest time.Duration // the longest batch: one prompt's store, and any growth it causes
					for w := range workers {
						for p := range batches[w] {
							start := time.Now()
							ix.Apply(uint32(w+1), batches[w][p:p+1])
							slowest = max(slowest, time.Since(start))
						}
						held += blocksHeld(ix, uint32(w+1))
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					if held != workers*prompts*blocks {
						b.Fatalf("%d blocks held, want %d", held, workers*prompts*blocks)
					}
					b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(held), "B/block")
					b.ReportMetric(float64(slowest.Microseconds()), "µs/slowest-batch")
					// Then the first 12 pods leave: the nodes of the last
					// four, stored after theirs, are moved down a few at
					// each of their batches (empty ones here) until the
					// slab is at least half full.
					for w := range workers - 4 {
						ix.Remove(uint32(w + 1))
					}
					var longest time.Duration
					for chunks := -1; chunks != len(ix.nodes.chunks); {
						chunks = len(ix.nodes.chunks)
						for w := workers - 4; w < workers; w++ {
							start := time.Now()
							ix.Apply(uint32(w+1), nil)
							longest = max(longest, time.Since(start))
						}
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(4*prompts*blocks), "B/block-after-scale-down")
					b.ReportMetric(float64(longest.Microseconds()), "µs/slowest-compacting-batch")
					runtime.KeepAlive(ix)
				}
			})
		}
	}
}

// BenchmarkLookup is a lookup of a 2,048-token prompt (128 blocks of 16
// tokens) that 1, 8 or all 16 workers hold, in an index of 100 other
// prompts a worker: what a request whose prompt the picker's own index
// does not know costs beyond its /tokenize.
func BenchmarkLookup(b *testing.B) {
	const workers, blocks, others = 16, 128, 100
	for _, holders := range []int{1, 8, 16} {
		b.Run(fmt.Sprintf("holders=%d", holders), func(b *testing.B) {
			ix := New(0)
			for w := range workers {
				for p := range others {
					tokens := prompt(uint32(1+w*others+p)*blocks*bs, blocks, -1)
					ix.Apply(uint32(w+1), []kvevents.Event{stored(uint64(1+w*others+p), tokens, 0, blocks, "")})
				}
			}
			shared := prompt(0, blocks, -1)
			for w := range holders {
				ix.Apply(uint32(w+1), []kvevents.Event{stored(0, shared, 0, blocks, "")})
			}
			var dst []Hold
			for b.Loop() {
				dst = ix.Lookup(shared, "", "", dst)
			}
			if len(dst) != holders || dst[0].Blocks != blocks {
				b.Fatalf("holds %+v, want %d workers of %d blocks", dst, holders, blocks)
			}
		})
	}
}

// TestAClearedEngineLetsItsSlotsGo: an engine whose events were
// interrupted keeps no table sized for what it held, and is filled again
// from its next events.
func TestAClearedEngineLetsItsSlotsGo(t *testing.T) {
	ix := New(0)
	a := prompt(1, 256, -1)
	ix.Apply(1, []kvevents.Event{stored(1, a, 0, 256, "")})
	ix.ClearEngine(1, 0)
	w := ix.workers[1][0]
	for i := range w.blocks.parts {
		if n := len(w.blocks.parts[i].slots); n != 0 {
			t.Fatalf("part %d keeps %d slots after the clear", i, n)
		}
	}
	ix.Apply(1, []kvevents.Event{stored(1, a, 0, 256, "")})
	if got := ix.Lookup(a, "", "", nil); len(got) != 1 || got[0].Blocks != 256 {
		t.Errorf("after storing again: holds %+v, want worker 1 with 256 blocks", got)
	}
}

// TestTheSlabShrinksAfterPodsLeave: when most pods leave, the nodes their
// blocks took are given back, down to a slab at most half full, while the
// blocks of the pods that stay are found as before. The pods store their
// prompts a step at a time, in turns, so every chunk holds every pod's
// nodes, and all of them hold a shared prompt, so its keys' chains are
// long.
func TestTheSlabShrinksAfterPodsLeave(t *testing.T) {
	const pods, blocks, step, shared = 10, 400, 16, 64
	ix := New(0)
	common := prompt(1<<24, shared, -1)
	own := make([][]uint32, pods+1)
	for id := uint32(1); id <= pods; id++ {
		own[id] = prompt(id<<16, blocks, -1)
		ix.Apply(id, []kvevents.Event{stored(1, common, 0, shared, "")})
	}
	for from := 0; from < blocks; from += step {
		for id := uint32(1); id <= pods; id++ {
			ix.Apply(id, []kvevents.Event{stored(uint64(id)+1, own[id], from, from+step, "a")})
		}
	}
	grown := len(ix.nodes.chunks)
	lookups := func() [][]Hold { // the holds of the pods that stay
		var out [][]Hold
		for _, p := range [][]uint32{common, own[1], own[2]} {
			for _, adapter := range []string{"", "a"} {
				h := ix.Lookup(p, adapter, "", nil)
				h = slices.DeleteFunc(h, func(h Hold) bool { return h.Worker > 2 })
				out = append(out, sorted(h))
			}
		}
		return out
	}
	before := lookups()
	for id := uint32(3); id <= pods; id++ {
		ix.Remove(id)
	}
	ix.Apply(1, []kvevents.Event{removed(1 << 40)}) // a write compacts a step
	// Then steps with no events, as the subscriber takes at a steady pace.
	for range 2 * grown {
		ix.Compact()
	}
	checkHolders(t, ix)
	checkAdapters(t, ix)
	live := ix.nodes.live
	if live != 2*(blocks+shared) {
		t.Fatalf("%d blocks held, want %d", live, 2*(blocks+shared))
	}
	if want := max(minChunks, (2*live+chunkSize-1)/chunkSize); len(ix.nodes.chunks) > want {
		t.Errorf("%d chunks kept for %d blocks (%d before the pods left), want at most %d", len(ix.nodes.chunks), live, grown, want)
	}
	if diff := cmp.Diff(before, lookups()); diff != "" {
		t.Errorf("lookups after the slab shrank (-before +after):\n%s", diff)
	}
}

// TestOffloadedBlocksAreHeldUntilEveryTierDropsThem: with vLLM's KV
// offloading a server also publishes the blocks it copies to another tier
// (no tokens, no parent, medium "CPU") and their evictions there, under
// the GPU blocks' hashes. A block the GPU evicted while a tier keeps its
// copy is still held, as offloaded; it goes when neither holds it, and is
// on the GPU again once stored again. A copy of a block the index never
// held on the GPU cannot be keyed, and is counted.
func TestOffloadedBlocksAreHeldUntilEveryTierDropsThem(t *testing.T) {
	a := prompt(1, 6, -1)
	gpu := stored(1, a, 0, 6, "")
	gpu.Medium = "GPU"
	hashes := gpu.Hashes
	ix := New(0)
	held := func() Hold {
		h := ix.Lookup(a, "", "", nil)
		if len(h) == 0 {
			return Hold{}
		}
		return h[0]
	}
	// want is the prompt's run on worker 1; blocks and offloaded what
	// Holds says of all its blocks.
	steps := []struct {
		what              string
		events            []kvevents.Event
		want              Hold
		blocks, offloaded int
	}{
		{"stored on the GPU, copied to the CPU", []kvevents.Event{
			gpu, {Kind: kvevents.BlockStored, Hashes: hashes, Medium: "CPU"},
		}, Hold{Worker: 1, Blocks: 6, Prompt: 6}, 6, 0},
		{"the GPU evicts blocks 3-5", []kvevents.Event{
			{Kind: kvevents.BlockRemoved, Hashes: hashes[3:], Medium: "GPU"},
		}, Hold{Worker: 1, Blocks: 6, Offloaded: 3, Prompt: 6}, 6, 3},
		{"the CPU drops block 4's copy", []kvevents.Event{
			{Kind: kvevents.BlockRemoved, Hashes: hashes[4:5], Medium: "cpu"},
		}, Hold{Worker: 1, Blocks: 4, Offloaded: 1, Prompt: 6}, 5, 2},
		{"the CPU drops copies the GPU still holds, the GPU a block it no longer holds", []kvevents.Event{
			{Kind: kvevents.BlockRemoved, Hashes: hashes[:3], Medium: "CPU"},
			{Kind: kvevents.BlockRemoved, Hashes: hashes[5:], Medium: "GPU"},
		}, Hold{Worker: 1, Blocks: 4, Offloaded: 1, Prompt: 6}, 5, 2},
		{"blocks 3-5 prefilled again", []kvevents.Event{
			stored(1, a, 3, 6, ""),
		}, Hold{Worker: 1, Blocks: 6, Prompt: 6}, 6, 0},
		{"a copy on another tier of a block never held, and a removal naming no medium (the GPU's)", []kvevents.Event{
			{Kind: kvevents.BlockStored, Hashes: []uint64{1 << 40}, Medium: "DISK"},
			removed(hashes[1]),
		}, Hold{Worker: 1, Blocks: 1, Prompt: 6}, 5, 0},
	}
	for _, s := range steps {
		ix.Apply(1, s.events)
		if got := held(); got != s.want {
			t.Errorf("%s: holds %+v, want %+v", s.what, got, s.want)
		}
		if blocks, offloaded := ix.Held(1); blocks != s.blocks || offloaded != s.offloaded {
			t.Errorf("%s: worker 1 holds %d blocks, %d only offloaded; want %d and %d", s.what, blocks, offloaded, s.blocks, s.offloaded)
		}
		checkHolders(t, ix)
	}
	if _, d := ix.Stats(); d != (Dropped{Offloaded: 1}) {
		t.Errorf("dropped %+v, want the copy of the block never held", d)
	}
	// Worker 2 holds the prompt on its GPU under one set of hashes, and
	// under another only as offloaded copies, stored after: each block
	// counts as on the GPU.
	again := stored(7, a, 0, 6, "")
	ix.Apply(2, []kvevents.Event{stored(8, a, 0, 6, ""), again,
		{Kind: kvevents.BlockStored, Hashes: again.Hashes, Medium: "CPU"},
		{Kind: kvevents.BlockRemoved, Hashes: again.Hashes, Medium: "GPU"}})
	h := ix.Lookup(a, "", "", nil)
	if got := sorted(h); len(got) != 2 || got[1] != (Hold{Worker: 2, Blocks: 6, Prompt: 6}) {
		t.Errorf("a block held on the GPU and, under another hash, offloaded: holds %+v, want worker 2 with 6 blocks on the GPU", got)
	}
	checkHolders(t, ix)
	checkAdapters(t, ix)
}

// TestABlockStaysOffloadedWhileAnyTierHoldsIt: vLLM's tiered offloading
// publishes a block's copies on each tier (CPU, STORAGE) under the same
// hash, and a connector publishing chunks re-announces a hash once for
// each chunk that holds it. A copy dropped from one tier, or by one chunk,
// leaves the block offloaded while another still holds it; it goes with
// the last.
func TestABlockStaysOffloadedWhileAnyTierHoldsIt(t *testing.T) {
	a := prompt(1, 4, -1)
	gpu := stored(1, a, 0, 4, "")
	tier := func(kind kvevents.Kind, medium string) kvevents.Event {
		return kvevents.Event{Kind: kind, Medium: medium, Hashes: gpu.Hashes}
	}
	cases := map[string]struct {
		events []kvevents.Event
		want   []Hold
	}{
		"demoted from the CPU to storage, then evicted from the GPU": {
			events: []kvevents.Event{gpu,
				tier(kvevents.BlockStored, "CPU"), tier(kvevents.BlockStored, "STORAGE"),
				tier(kvevents.BlockRemoved, "CPU"), removed(gpu.Hashes...)},
			want: []Hold{{Worker: 1, Blocks: 4, Offloaded: 4, Prompt: 4}},
		},
		"two chunks holding it, one dropped": {
			events: []kvevents.Event{gpu,
				tier(kvevents.BlockStored, "CPU"), tier(kvevents.BlockStored, "CPU"),
				removed(gpu.Hashes...), tier(kvevents.BlockRemoved, "CPU")},
			want: []Hold{{Worker: 1, Blocks: 4, Offloaded: 4, Prompt: 4}},
		},
		"every tier's copy dropped": {
			events: []kvevents.Event{gpu,
				tier(kvevents.BlockStored, "CPU"), tier(kvevents.BlockStored, "STORAGE"), removed(gpu.Hashes...),
				tier(kvevents.BlockRemoved, "STORAGE"), tier(kvevents.BlockRemoved, "CPU")},
		},
		"a tier dropping a copy it never announced": {
			events: []kvevents.Event{gpu,
				tier(kvevents.BlockRemoved, "CPU"), tier(kvevents.BlockStored, "CPU"), removed(gpu.Hashes...)},
			want: []Hold{{Worker: 1, Blocks: 4, Offloaded: 4, Prompt: 4}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ix := New(0)
			ix.Apply(1, tc.events)
			got := ix.Lookup(a, "", "", nil)
			if len(got) == 0 {
				got = nil
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("holds (-want +got):\n%s", diff)
			}
			if _, offloaded := ix.Held(1); offloaded != len(tc.want)*4 {
				t.Errorf("%d blocks held only offloaded, want %d", offloaded, len(tc.want)*4)
			}
			checkHolders(t, ix)
			checkAdapters(t, ix)
		})
	}
}

// TestOffloadedCopiesNamedByDigestsAreTheGPUsBlocks: on vLLM's defaults
// the GPU pool publishes each block hash as an int (the digest's low 64
// bits) while the OffloadingConnector publishes the raw digests of the
// same blocks. A prompt copied to the CPU tier and then evicted from the
// GPU is still held, as offloaded.
func TestOffloadedCopiesNamedByDigestsAreTheGPUsBlocks(t *testing.T) {
	a := prompt(1, 4, -1)
	digests := make([][]byte, 4)
	gpu := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: bs, Medium: "GPU", TokenIDs: a}
	for i := range digests {
		d := sha256.Sum256([]byte{byte(i)})
		digests[i] = d[:]
		gpu.Hashes = append(gpu.Hashes, binary.BigEndian.Uint64(d[24:]))
	}
	// The connector's BlockStored, map-shaped: digests, no tokens, no
	// parent, block size 0.
	tier := msg{0x83}.str("ts").raw(1).str("events").raw(0x91, 0x84).
		str("type").str("BlockStored").str("block_hashes").raw(0x94)
	for _, d := range digests {
		tier = tier.bin(d)
	}
	tier = tier.str("block_size").raw(0).str("medium").str("CPU").str("data_parallel_rank").raw(0)

	ix := New(0)
	st := &stream{s: &Subscriber{Index: ix}, id: 1, log: logr.Discard()}
	for seq, payload := range [][]byte{
		kvevents.AppendBatch(nil, &kvevents.Batch{TS: 1, Events: []kvevents.Event{gpu}}),
		tier,
		kvevents.AppendBatch(nil, &kvevents.Batch{TS: 2, Events: []kvevents.Event{removed(gpu.Hashes...)}}),
	} {
		st.apply(uint64(seq), payload)
	}
	want := []Hold{{Worker: 1, Blocks: 4, Offloaded: 4, Prompt: 4}}
	if diff := cmp.Diff(want, ix.Lookup(a, "", "", nil)); diff != "" {
		_, d := ix.Stats()
		t.Errorf("after the CPU tier copied the prompt and the GPU evicted it (copies of unknown blocks: %d) (-want +got):\n%s", d.Offloaded, diff)
	}
}

// msg builds msgpack by hand for what AppendBatch does not write: strings
// under 32 bytes, bytes under 256.
type msg []byte

func (b msg) str(s string) msg  { return append(append(b, 0xa0|byte(len(s))), s...) }
func (b msg) bin(x []byte) msg  { return append(append(b, 0xc4, byte(len(x))), x...) }
func (b msg) raw(x ...byte) msg { return append(b, x...) }

// TestAHybridModelsGroupsAreKeptApart: a server of a hybrid model publishes
// each KV-cache group's blocks under the same hashes, and its
// sliding-window group evicts a prompt's early blocks while the
// full-attention group keeps them. The index follows the full-attention
// group, even when another group's events come first, and a server whose
// only group is a sliding window is followed in that one.
func TestAHybridModelsGroupsAreKeptApart(t *testing.T) {
	a := prompt(1, 6, -1)
	inGroup := func(ev kvevents.Event, g int64, kind string) kvevents.Event {
		ev.Group, ev.HasGroup, ev.SpecKind = g, true, kind
		return ev
	}
	window := inGroup(stored(1, a, 0, 6, ""), 1, "sliding_window")
	full := inGroup(stored(1, a, 0, 6, ""), 0, "full_attention")
	hashes := full.Hashes
	ix := New(0)
	held := func(worker uint32) int {
		h := ix.Lookup(a, "", "", nil)
		for _, x := range h {
			if x.Worker == worker {
				return x.Blocks
			}
		}
		return 0
	}
	ix.Apply(1, []kvevents.Event{
		window, full, window,
		inGroup(removed(hashes[:4]...), 1, ""), // the window slides past blocks 0-3
	})
	if got := held(1); got != 6 {
		t.Fatalf("after the sliding-window group evicts: %d blocks held, want the full-attention group's 6", got)
	}
	if _, d := ix.Stats(); d != (Dropped{OtherGroup: 10}) {
		t.Errorf("dropped %+v, want the sliding-window group's 6 stored after the full-attention group's and 4 removed", d)
	}
	ix.Apply(1, []kvevents.Event{inGroup(removed(hashes[4]), 0, "")})
	if got := held(1); got != 4 {
		t.Errorf("after the full-attention group evicts block 4: %d blocks held, want 4", got)
	}
	ix.Apply(2, []kvevents.Event{inGroup(stored(1, a, 0, 6, ""), 0, "sliding_window")})
	if got := held(2); got != 6 {
		t.Errorf("a server whose only group is a sliding window: %d blocks held, want 6", got)
	}
	ix.Apply(1, []kvevents.Event{{Kind: kvevents.AllBlocksCleared}, window})
	if got := held(1); got != 6 {
		t.Errorf("after a clear, the first group stored again: %d blocks held, want 6", got)
	}
}

// blocksHeld is what Held says worker id holds in all.
func blocksHeld(ix *Index, id uint32) int {
	n, _ := ix.Held(id)
	return n
}

// A server that names an adapter by its lora_id alone sends an event for
// every step of a request on it: applying one allocates nothing once the
// index has seen the id.
func TestLoraIDEventAllocations(t *testing.T) {
	ix := New(0)
	a := prompt(0, 6, -1)
	evs := []kvevents.Event{byLoraID(stored(1, a, 0, 6, ""), 7)}
	ix.ApplyEngine(1, 0, evs)
	if allocs := testing.AllocsPerRun(100, func() { ix.ApplyEngine(1, 0, evs) }); allocs != 0 {
		t.Errorf("applying an event of a known lora_id allocates %v times, want 0", allocs)
	}
}

// The name of an adapter known by number alone is the same whether it was
// kept or made again after the names were forgotten to make room.
func TestLoraIDNamesPastTheirBound(t *testing.T) {
	m := loraIDNames{}
	first := m.name(7)
	for id := range int64(2 * maxLoraIDNames) {
		if got, want := m.name(id+100), "\xfflora_id "+strconv.FormatInt(id+100, 10); got != want {
			t.Fatalf("name(%d) = %q, want %q", id+100, got, want)
		}
	}
	if len(m) > maxLoraIDNames {
		t.Errorf("%d names kept, want at most %d", len(m), maxLoraIDNames)
	}
	if got := m.name(7); got != first {
		t.Errorf("name(7) = %q after the names were forgotten, want %q as before", got, first)
	}
}

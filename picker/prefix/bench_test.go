package prefix

import (
	"fmt"
	"runtime"
	"testing"
)

func BenchmarkHashes(b *testing.B) {
	ix := New()
	for _, size := range []int{1 << 10, 32 << 10, 400 << 10} {
		// Chat-template pieces of uneven length, as the body parser hands them.
		prompt := splitEvery(text('h', size), 997)
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			var hs []uint64
			for b.Loop() {
				hs = ix.Hashes(hs, "model", "", prompt)
			}
		})
	}
}

// BenchmarkMatchInsert is one request's index work on a warm index: match
// a 32 KB prompt sharing its first half with earlier traffic, then insert it
// for the chosen worker.
func BenchmarkMatchInsert(b *testing.B) {
	const workers = 100
	ix := New()
	for id := uint32(1); id <= workers; id++ {
		ix.AddWorker(id)
	}
	sys := text('s', 16<<10)
	var hs []uint64
	for i := range 2000 {
		hs = ix.Hashes(hs, "model", "", [][]byte{sys, text(byte(i), 16<<10)})
		ix.Insert(uint32(i%workers)+1, 0, hs)
	}
	prompt := [][]byte{sys, text('q', 16<<10)}
	var s Scratch
	b.ReportAllocs()
	for b.Loop() {
		hs = ix.Hashes(hs, "model", "", prompt)
		best := Match{Worker: 1}
		for _, m := range ix.Match(hs, &s) {
			if m.Blocks > best.Blocks {
				best = m
			}
		}
		ix.Insert(best.Worker, 0, hs)
	}
}

// BenchmarkIndexMemory reports the heap the index takes per indexed block
// (one worker per block, the common case once routing is cache-aware). The
// shards' tables grow by a quarter as they fill, so the figure moves with
// the count: 1,215,000 blocks is just past a growth of all sixteen (the
// worst case), 2^20 and 1.25×2^20 halfway to the next.
func BenchmarkIndexMemory(b *testing.B) {
	for _, blocks := range []int{1 << 20, 1_215_000, 5 << 18} {
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) {
			hs := make([]uint64, 0, blocks)
			for i := range blocks {
				hs = append(hs, mix(uint64(i)+k1, k2))
			}
			for b.Loop() {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				ix := New()
				for w := uint32(1); w <= 64; w++ {
					ix.AddWorker(w)
				}
				per := blocks / 64
				for w := range 64 {
					ix.Insert(uint32(w)+1, blocks, hs[w*per:(w+1)*per])
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(ix.Stats().Blocks), "B/block")
				runtime.KeepAlive(ix)
			}
		})
	}
}

// BenchmarkIndexAtCap reports the heap of an index driven past its default
// cap by workers claiming 10^9 KV blocks: 400 unique 1 MiB prompts (6.5M
// blocks) over 8 workers. The index holds DefaultMaxBlocks entries at most.
func BenchmarkIndexAtCap(b *testing.B) {
	const workers, prompts, perPrompt = 8, 400, 1 << 20 / BlockSize
	hs := make([]uint64, perPrompt)
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ix := New()
		for w := uint32(1); w <= workers; w++ {
			ix.AddWorker(w)
		}
		for p := range prompts {
			for i := range hs {
				hs[i] = mix(uint64(p*perPrompt+i)+k1, k2)
			}
			ix.Insert(uint32(p%workers)+1, hugeCapacity, hs)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		st := ix.Stats()
		b.ReportMetric(float64(st.Entries), "entries")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(st.Entries), "B/entry")
		runtime.KeepAlive(ix)
	}
}

// BenchmarkInsertChurn is the index work of one pick of a 400 KB prompt on
// a warm index, as BenchmarkHandle in picker/extproc drives it: of 100
// workers at their default capacity, 16 each serve a tenant, whose system
// prompt of 3,200 blocks opens four conversations of 3,500 blocks more,
// sent in turn. The worker's five prompts overflow its capacity a little,
// so each insert refreshes about 5,800 blocks and brings back 800 evicted
// ones, evicting as many.
func BenchmarkInsertChurn(b *testing.B) {
	const workers, tenants, convs, system, conv = 100, 16, 4, 3200, 3500
	ix := New()
	for w := uint32(1); w <= workers; w++ {
		ix.AddWorker(w)
	}
	prompts := make([][]uint64, tenants*convs)
	for p := range prompts {
		for i := range system + conv {
			key := uint64(p%tenants)<<32 | uint64(i) // the tenant's system prompt
			if i >= system {
				key = uint64(p)<<48 | uint64(i)
			}
			prompts[p] = append(prompts[p], mix(key, k1))
		}
	}
	n := 0
	insert := func() {
		p := n % len(prompts)
		ix.Insert(uint32(p%tenants)+1, 0, prompts[p])
		n++
	}
	for range 4 * len(prompts) {
		insert()
	}
	b.ReportAllocs()
	for b.Loop() {
		insert()
	}
}

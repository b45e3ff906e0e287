package prefix

import (
	"fmt"
	"testing"
)

// A worker whose KV capacity is small next to a group of 64 blocks (a
// model server holding two long prompts) keeps whole prompts, the least
// recently used one evicted, and never more blocks than its capacity.
func TestTightCapacityKeepsWholePromptsLRU(t *testing.T) {
	const capacity = 272 // 272 KV blocks × 16 tokens × 4 bytes / 64-byte blocks
	ix := New()
	ix.AddWorker(1)
	prompt := func(i int) []uint64 {
		return ix.Hashes(nil, "m", "", [][]byte{[]byte(fmt.Sprintf("tenant %d:", i)), text(byte('a'+i), 125*BlockSize)})
	}
	a, b, c := prompt(0), prompt(1), prompt(2)
	var s Scratch
	matched := func(hs []uint64) int {
		for _, m := range ix.Match(hs, &s) {
			if m.Worker == 1 {
				return m.Blocks
			}
		}
		return 0
	}
	ix.Insert(1, capacity, a)
	ix.Insert(1, capacity, b)
	if got, want := [2]int{matched(a), matched(b)}, [2]int{len(a), len(b)}; got != want {
		t.Fatalf("two prompts that fit: matched %v, want %v", got, want)
	}
	ix.Insert(1, capacity, a) // a is now the most recently used
	ix.Insert(1, capacity, c)
	if got := matched(c); got != len(c) {
		t.Errorf("newest prompt matched %d blocks, want %d", got, len(c))
	}
	if got := matched(a); got != len(a) {
		t.Errorf("recently used prompt matched %d blocks, want %d", got, len(a))
	}
	if got := matched(b); got == len(b) {
		t.Errorf("least recently used prompt still fully matched (%d blocks) past capacity", got)
	}
	if n := ix.WorkerBlocks(1); n > capacity {
		t.Errorf("worker holds %d blocks, capacity %d", n, capacity)
	}
}

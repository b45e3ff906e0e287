package prefix

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// A sharded index forgets a worker's blocks in the order one list over all
// its blocks would: least recently used first, a prompt's tail before its
// head. Checked against a single-shard index (exact LRU) on prompts that
// share system prompts of several groups, with capacities from a fraction
// of one prompt to a few prompts: after every insert both match every
// prompt alike.
func TestShardedEvictionIsLRUAcrossShards(t *testing.T) {
	for _, capacity := range []int{40, 150, 300, 700} {
		t.Run(fmt.Sprint("capacity=", capacity), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(capacity), 7))
			exact, sharded := New(WithShards(1)), New(WithShards(16))
			for _, ix := range []*Index{exact, sharded} {
				ix.AddWorker(1)
				ix.AddWorker(2)
			}
			type prompt struct{ system, question int }
			var prompts []prompt
			for s := range 6 {
				for q := range 4 {
					prompts = append(prompts, prompt{s, q})
				}
			}
			promptText := func(p prompt) [][]byte {
				system := bytes.Repeat([]byte{byte('a' + p.system)}, (40+37*p.system)*BlockSize)
				return [][]byte{system, fmt.Appendf(nil, "question %d of %d", p.question, p.system)}
			}
			var se, ss Scratch
			for step := range 300 {
				p := prompts[int(rng.ExpFloat64()*5)%len(prompts)]
				w := uint32(1 + rng.IntN(2))
				exact.Insert(w, capacity, exact.Hashes(nil, "m", "", promptText(p)))
				sharded.Insert(w, capacity, sharded.Hashes(nil, "m", "", promptText(p)))
				for _, q := range prompts {
					want := byID(exact.Match(exact.Hashes(nil, "m", "", promptText(q)), &se))
					got := byID(sharded.Match(sharded.Hashes(nil, "m", "", promptText(q)), &ss))
					if !maps.Equal(got, want) {
						t.Fatalf("step %d, prompt %v: sharded index matched %v, exact LRU %v", step, q, got, want)
					}
				}
			}
		})
	}
}

// An index holds at most 65,535 live workers (a node keeps its slot plus
// one in 16 bits): one more is not indexed, and nothing else changes.
func TestWorkersPastTheSlotLimitAreNotIndexed(t *testing.T) {
	ix := New()
	const limit = maxSlots
	for id := range uint32(limit + 1) {
		ix.AddWorker(id + 1)
	}
	hs := ix.Hashes(nil, "m", "", [][]byte{text('x', 4*BlockSize)})
	var s Scratch
	for _, id := range []uint32{1, limit, limit + 1} {
		ix.Insert(id, 0, hs)
	}
	got := byID(ix.Match(hs, &s))
	if got[1] != len(hs) || got[limit] != len(hs) {
		t.Errorf("indexed workers matched %v, want %d blocks on workers 1 and %d", got, len(hs), limit)
	}
	if n, ok := got[limit+1]; ok {
		t.Errorf("worker %d, past the limit, matched %d blocks", limit+1, n)
	}
	ix.RemoveWorker(limit + 1) // harmless
	ix.RemoveWorker(1)
	ix.AddWorker(limit + 1) // takes the freed slot
	ix.Insert(limit+1, 0, hs)
	if got := byID(ix.Match(hs, &s)); got[limit+1] != len(hs) {
		t.Errorf("after a slot was freed, worker %d matched %v", limit+1, got)
	}
}

func byID(ms []Match) map[uint32]int {
	out := map[uint32]int{}
	for _, m := range ms {
		out[m.Worker] = m.Blocks
	}
	return out
}

package prefix

import (
	"fmt"
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
			text := func(p prompt) [][]byte {
				system := make([]byte, (40+37*p.system)*BlockSize)
				for i := range system {
					system[i] = byte('a' + p.system)
				}
				return [][]byte{system, fmt.Appendf(nil, "question %d of %d", p.question, p.system)}
			}
			var se, ss Scratch
			for step := range 300 {
				p := prompts[int(rng.ExpFloat64()*5)%len(prompts)]
				w := uint32(1 + rng.IntN(2))
				exact.Insert(w, capacity, exact.Hashes(nil, "m", "", text(p)))
				sharded.Insert(w, capacity, sharded.Hashes(nil, "m", "", text(p)))
				for _, q := range prompts {
					want := byWorker(exact.Match(exact.Hashes(nil, "m", "", text(q)), &se))
					got := byWorker(sharded.Match(sharded.Hashes(nil, "m", "", text(q)), &ss))
					if got != want {
						t.Fatalf("step %d, prompt %v: sharded index matched %v, exact LRU %v", step, q, got, want)
					}
				}
			}
		})
	}
}

// byWorker is the blocks matched on workers 1 and 2.
func byWorker(ms []Match) (out [2]int) {
	for _, m := range ms {
		out[m.Worker-1] = m.Blocks
	}
	return out
}

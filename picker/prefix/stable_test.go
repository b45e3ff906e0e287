package prefix

import "testing"

// FuzzStableHash checks that the stable hash depends on the prompt's bytes,
// not on how they are cut into segments, and only on the first blocks.
func FuzzStableHash(f *testing.F) {
	f.Add([]byte("a shared system prompt that is longer than one block of sixty-four bytes, for sure"), uint8(10), uint8(2))
	f.Add([]byte(""), uint8(0), uint8(1))
	f.Fuzz(func(t *testing.T, prompt []byte, cut, blocks uint8) {
		n := int(blocks%8) + 1
		whole, hashed := StableHash("m", "salt", [][]byte{prompt}, n)
		c := int(cut) % (len(prompt) + 1)
		split, hashed2 := StableHash("m", "salt", [][]byte{prompt[:c], nil, prompt[c:]}, n)
		if whole != split || hashed != hashed2 {
			t.Fatalf("cut at %d: %x (%d blocks) vs %x (%d blocks)", c, whole, hashed, split, hashed2)
		}
		if want := min(len(prompt)/BlockSize, n); hashed != want {
			t.Fatalf("hashed %d blocks, want %d", hashed, want)
		}
		longer, _ := StableHash("m", "salt", [][]byte{prompt, []byte("a tail past the hashed blocks, long enough to fill one block or more ....")}, n)
		if hashed == n && longer != whole {
			t.Fatalf("text after the first %d blocks changed the hash", n)
		}
		if other, _ := StableHash("other", "salt", [][]byte{prompt}, n); hashed > 0 && other == whole {
			t.Fatalf("another model hashes alike")
		}
	})
}

func TestRendezvousMovesOnlyTheLeavingWorker(t *testing.T) {
	workers := []uint64{StableString("a"), StableString("b"), StableString("c"), StableString("d")}
	top := func(key uint64, ws []uint64) uint64 {
		best, bw := uint64(0), uint64(0)
		for i, w := range ws {
			if x := Rendezvous(key, w); i == 0 || x > bw {
				best, bw = w, x
			}
		}
		return best
	}
	moved, counts := 0, map[uint64]int{}
	for k := range uint64(4000) {
		key := StableString(string(rune(k)) + "prefix")
		before, after := top(key, workers), top(key, workers[:3])
		counts[before]++
		if before != workers[3] && after != before {
			t.Fatalf("key %d moved from a worker that stayed", k)
		}
		if before == workers[3] {
			moved++
		}
	}
	for _, w := range workers {
		if counts[w] < 800 || counts[w] > 1200 {
			t.Errorf("worker holds %d of 4000 keys, want about 1000: %v", counts[w], counts)
		}
	}
	if moved == 0 {
		t.Errorf("no key had its home on the leaving worker")
	}
}

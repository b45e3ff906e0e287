package kvindex

import (
	"cmp"
	"slices"

	"github.com/inferpick/inferpick/picker/kvevents"
)

// Hold is how much of a prompt one worker's cache holds: its first Blocks
// full blocks, Offloaded of which are only in an offloading tier (copies
// vLLM's KV offloading made before the GPU evicted them; the server reads
// them back instead of prefilling them). For a worker whose server fronts
// several data-parallel engines, both are the mean over its engines of
// what each holds (rounded): its balancer places a request on an engine by
// load, not by what the engine holds.
type Hold struct {
	Worker    uint32
	Blocks    int
	Offloaded int
}

// Lookup returns the workers whose caches hold a leading run of the prompt's
// blocks, and the prompt's full blocks. tokens are the prompt's token ids as
// the model server gives them; adapter is the LoRA adapter the request names
// ("" for the base model) and salt the request's cache salt ("" for none),
// which vLLM keys the prompt's first block by. The holds are appended to
// dst[:0], longest first is not guaranteed.
func (ix *Index) Lookup(tokens []uint32, adapter, salt string, dst []Hold) (holds []Hold, blocks int) {
	dst = dst[:0]
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	bs := ix.blockSize
	if bs == 0 {
		return dst, 0
	}
	var buf [16]run
	runs := buf[:0]
	blocks = len(tokens) / bs
	key := seed(adapter)
	var salted uint64
	if salt != "" {
		salted = kvevents.SaltKeys(salt).Hash()
	}
	for i := range blocks {
		key = chain(key, tokens[i*bs:(i+1)*bs])
		if i == 0 && salt != "" {
			key = mix(key, salted)
		}
		_, first := ix.keys.find(&ix.nodes, key)
		if i == 0 {
			for r := first; r != 0; r = ix.nodes.at(r).next {
				runs = append(runs, run{eng: ix.nodes.at(r).eng, offAt: -1})
			}
			slices.SortFunc(runs, func(a, b run) int { return cmp.Compare(a.eng, b.eng) })
			runs = slices.CompactFunc(runs, func(a, b run) bool { return a.eng == b.eng })
		}
		// An engine whose run reached this block and holds it extends its
		// run; the others' runs ended. An engine that holds the block
		// under two hashes counts it on its GPU if either copy is there.
		alive := 0
		for r := first; r != 0; {
			nd := ix.nodes.at(r)
			gpu := nd.adapter&inGPU != 0
			if j := findRun(runs, nd.eng); j >= 0 {
				switch run := &runs[j]; {
				case run.blocks == i:
					run.blocks = i + 1
					if !gpu {
						run.offloaded++
						run.offAt = i
					}
					alive++
				case run.blocks == i+1 && gpu && run.offAt == i:
					run.offloaded--
					run.offAt = -1
				}
			}
			r = nd.next
		}
		if alive == 0 {
			break
		}
	}
	return ix.perWorker(runs, dst), blocks
}

// findRun returns the index of engine eng's run in runs, sorted by engine,
// or -1: by a scan when they are few, else by halving.
func findRun(runs []run, eng uint32) int {
	if len(runs) <= 16 {
		for j := range runs {
			if runs[j].eng == eng {
				return j
			}
		}
		return -1
	}
	lo, hi := 0, len(runs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if runs[m].eng < eng {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(runs) && runs[lo].eng == eng {
		return lo
	}
	return -1
}

// run is the leading blocks of a prompt one engine holds, offloaded of
// them only in an offloading tier, the last of those at block offAt (-1:
// none).
type run struct {
	eng       uint32 // the engine's slot
	blocks    int
	offloaded int
	offAt     int
}

// perWorker appends to dst each worker's blocks: its engine's run, or the
// mean of its engines' runs when it has several.
func (ix *Index) perWorker(runs []run, dst []Hold) []Hold {
	for _, r := range runs {
		id := ix.engines[r.eng].src.id
		j := -1
		if ix.enginesLocked(id) > 1 { // another engine's run may be there already
			j = slices.IndexFunc(dst, func(h Hold) bool { return h.Worker == id })
		}
		if j < 0 {
			j = len(dst)
			dst = append(dst, Hold{Worker: id})
		}
		dst[j].Blocks += r.blocks
		dst[j].Offloaded += r.offloaded
	}
	for j := range dst {
		if n := ix.enginesLocked(dst[j].Worker); n > 1 {
			dst[j].Blocks = (dst[j].Blocks + n/2) / n
			dst[j].Offloaded = (dst[j].Offloaded + n/2) / n
		}
	}
	return dst
}

// Adapter reports whether blocks were stored under the adapter name: a
// request naming it is for that adapter, not for the base model.
func (ix *Index) Adapter(name string) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.adapters.held(name)
}

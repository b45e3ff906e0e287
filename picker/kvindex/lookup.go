package kvindex

import (
	"cmp"
	"slices"

	"github.com/inferpick/inferpick/picker/kvevents"
)

// Hold is how much of a prompt one worker's cache holds: the first Blocks
// of the prompt's Prompt full blocks, in the worker's block size (a prompt
// is cut in blocks as each server cuts it), Offloaded of which are
// only in an offloading tier (copies vLLM's KV offloading made before the
// GPU evicted them; the server reads them back instead of prefilling
// them). For a worker whose server fronts several data-parallel engines,
// Blocks and Offloaded are the mean over its engines of what each holds
// (rounded): its balancer places a request on an engine by load, not by
// what the engine holds.
type Hold struct {
	Worker    uint32
	Blocks    int
	Offloaded int
	Prompt    int
}

// Lookup returns the workers whose caches hold a leading run of the
// prompt's blocks. tokens are the prompt's token ids as the model server
// gives them; adapter is the LoRA adapter the request names ("" for the
// base model) and salt the request's cache salt ("" for none), which vLLM
// keys the prompt's first block by. The prompt is cut into blocks once for
// each block size the servers store (one, or a few while servers of
// different sizes share the pool), and each worker's hold counts in blocks
// of its own. The holds are appended to dst[:0], longest first is not
// guaranteed.
func (ix *Index) Lookup(tokens []uint32, adapter, salt string, dst []Hold) []Hold {
	dst = dst[:0]
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var buf [16]run
	runs := buf[:0]
	var salted uint64
	if salt != "" {
		salted = kvevents.SaltKeys(salt).Hash()
	}
	for _, s := range ix.sizes {
		runs = ix.walk(runs, tokens, s.tokens, seed(adapter, s.tokens), salt != "", salted)
	}
	return ix.perWorker(runs, dst)
}

// walk appends to runs those of the engines holding the prompt's first
// block, cut in blocks of bs tokens chained from key, and follows them
// along the prompt: the runs of one block size are kept apart, sorted by
// engine.
func (ix *Index) walk(runs []run, tokens []uint32, bs int, key uint64, salt bool, salted uint64) []run {
	from := len(runs)
	blocks := len(tokens) / bs
	for i := range blocks {
		key = chain(key, tokens[i*bs:(i+1)*bs])
		if i == 0 && salt {
			key = mix(key, salted)
		}
		_, first := ix.keys.find(&ix.nodes, key)
		if i == 0 {
			for r := first; r != 0; r = ix.nodes.at(r).next {
				runs = append(runs, run{eng: ix.nodes.at(r).eng, offAt: -1, prompt: blocks})
			}
			own := runs[from:]
			slices.SortFunc(own, func(a, b run) int { return cmp.Compare(a.eng, b.eng) })
			runs = runs[:from+len(slices.CompactFunc(own, func(a, b run) bool { return a.eng == b.eng }))]
		}
		if !ix.extend(runs[from:], first, i) {
			break
		}
	}
	return runs
}

// extend adds block i, whose key's chain starts at node first, to the runs
// that reached it, and reports whether any did. An engine whose run
// reached the block and holds it extends its run; the others' runs ended.
// An engine that holds the block under two hashes counts it on its GPU if
// either copy is there.
func (ix *Index) extend(runs []run, first uint32, i int) bool {
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
	return alive > 0
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

// run is the leading blocks of a prompt of prompt blocks one engine holds,
// offloaded of them only in an offloading tier, the last of those at block
// offAt (-1: none).
type run struct {
	eng       uint32 // the engine's slot
	blocks    int
	offloaded int
	offAt     int
	prompt    int
}

// perWorker appends to dst each worker's blocks: its engine's run, or the
// mean of its engines' runs when it has several. A worker has one block
// size: its engines are one server's.
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
		dst[j].Prompt = r.prompt // a server's engines share its block size
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

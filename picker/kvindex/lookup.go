package kvindex

import "github.com/inferpick/inferpick/picker/kvevents"

// Hold is how much of a prompt one worker's cache holds: its first Blocks
// full blocks. For a worker whose server fronts several data-parallel
// engines, Blocks is the mean over its engines of the blocks each holds
// (rounded): its balancer places a request on an engine by load, not by
// what the engine holds.
type Hold struct {
	Worker uint32
	Blocks int
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
		hs := ix.holders[key]
		if i == 0 {
			if hs.first.n() != 0 {
				runs = append(runs, run{src: hs.first.src()})
			}
			for _, h := range hs.others() {
				runs = append(runs, run{src: h.src()})
			}
		}
		// An engine still in the run holds this block or its run ends at i.
		alive := 0
		for j := range runs {
			r := &runs[j]
			if r.blocks < i {
				continue // its run ended before
			}
			if hs.has(r.src) {
				r.blocks = i + 1
				alive++
			}
		}
		if alive == 0 {
			break
		}
	}
	return ix.perWorker(runs, dst), blocks
}

// run is the leading blocks of a prompt one engine holds.
type run struct {
	src
	blocks int
}

// perWorker appends to dst each worker's blocks: its engine's run, or the
// mean of its engines' runs when it has several.
func (ix *Index) perWorker(runs []run, dst []Hold) []Hold {
	for _, r := range runs {
		if n := ix.enginesLocked(r.id); n > 1 {
			found := false
			for j := range dst {
				if dst[j].Worker == r.id {
					dst[j].Blocks += r.blocks
					found = true
					break
				}
			}
			if !found {
				dst = append(dst, Hold{Worker: r.id, Blocks: r.blocks})
			}
			continue
		}
		dst = append(dst, Hold{Worker: r.id, Blocks: r.blocks})
	}
	for j := range dst {
		if n := ix.enginesLocked(dst[j].Worker); n > 1 {
			dst[j].Blocks = (dst[j].Blocks + n/2) / n
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

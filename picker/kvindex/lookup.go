package kvindex

import "github.com/inferpick/inferpick/picker/kvevents"

// Hold is how much of a prompt one worker's cache holds: its first Blocks
// full blocks.
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
			for _, h := range hs {
				dst = append(dst, Hold{Worker: h.id})
			}
		}
		// A worker still in the run holds this block or its run ends at i.
		alive := 0
		for j := range dst {
			d := &dst[j]
			if d.Blocks < i {
				continue // its run ended before
			}
			if contains(hs, d.Worker) {
				d.Blocks = i + 1
				alive++
			}
		}
		if alive == 0 {
			break
		}
	}
	return dst, blocks
}

// Adapter reports whether blocks were stored under the adapter name: a
// request naming it is for that adapter, not for the base model.
func (ix *Index) Adapter(name string) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.adapters[name] > 0
}

func contains(hs []holder, id uint32) bool {
	for _, h := range hs {
		if h.id == id {
			return true
		}
	}
	return false
}

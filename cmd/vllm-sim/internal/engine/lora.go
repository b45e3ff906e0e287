package engine

import (
	"slices"
	"time"
)

// adapters is the engine's LoRA state: the adapters loaded in memory, least
// recently used first, bounded by MaxCPULoRAs, and the distinct adapters of
// the batch being planned, bounded by MaxLoRAs. Guarded by Engine.mu.
type adapters struct {
	loaded []string // least recently used first
	batch  []string // adapters of the running sequences, rebuilt each plan
	loads  int64    // adapters loaded since start
	debt   time.Duration
}

// capacity is how many adapters stay loaded.
func (c Config) loraCapacity() int {
	return max(c.MaxCPULoRAs, c.MaxLoRAs)
}

// planBatch collects the adapters of the running sequences.
func (a *adapters) planBatch(running []*Sequence) {
	a.batch = a.batch[:0]
	for _, s := range running {
		if s.lora != "" && !slices.Contains(a.batch, s.lora) {
			a.batch = append(a.batch, s.lora)
		}
	}
}

// fits reports whether a sequence with adapter name may join the batch: the
// adapter is already in it or the batch has a free adapter slot.
func (a *adapters) fits(name string, maxLoRAs int) bool {
	return name == "" || slices.Contains(a.batch, name) || len(a.batch) < maxLoRAs
}

// use puts name in the batch and marks it most recently used, loading it
// (evicting the least recently used adapter outside the batch when full).
// It reports whether a load happened.
func (a *adapters) use(name string, capacity int) bool {
	if !slices.Contains(a.batch, name) {
		a.batch = append(a.batch, name)
	}
	if i := slices.Index(a.loaded, name); i >= 0 {
		a.loaded = append(slices.Delete(a.loaded, i, i+1), name)
		return false
	}
	a.load(name, capacity)
	return true
}

// load adds name as the most recently used adapter, evicting the least
// recently used ones outside the batch while over capacity.
func (a *adapters) load(name string, capacity int) {
	a.loads++
	a.loaded = append(a.loaded, name)
	for i := 0; len(a.loaded) > capacity && i < len(a.loaded); {
		if victim := a.loaded[i]; victim != name && !slices.Contains(a.batch, victim) {
			a.loaded = slices.Delete(a.loaded, i, i+1)
			continue
		}
		i++
	}
}

// LoadAdapter loads an adapter now, as vLLM's load_lora_adapter does: it
// becomes the most recently used, counts as a load, and the next step pays
// its load cost. It reports false if it was loaded already.
func (e *Engine) LoadAdapter(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if slices.Contains(e.lora.loaded, name) {
		return false
	}
	e.lora.load(name, e.cfg.loraCapacity())
	e.lora.debt += e.cfg.LoRALoadCost
	return true
}

// UnloadAdapter drops an adapter from memory; a later request for it loads
// it again. Sequences running with it finish.
func (e *Engine) UnloadAdapter(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lora.loaded = slices.DeleteFunc(e.lora.loaded, func(s string) bool { return s == name })
}

// Preload marks adapters loaded without cost, as at start-up. Past the
// capacity only the last ones stay.
func (e *Engine) Preload(names ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range names {
		if !slices.Contains(e.lora.loaded, n) {
			e.lora.load(n, e.cfg.loraCapacity())
			e.lora.loads--
		}
	}
}

// distinctAdapters returns the sorted set of the sequences' adapters.
func distinctAdapters(seqs []*Sequence) []string {
	var out []string
	for _, s := range seqs {
		if s.lora != "" && !slices.Contains(out, s.lora) {
			out = append(out, s.lora)
		}
	}
	slices.Sort(out)
	return out
}

// saltOf is mixed into every block hash of a sequence with an adapter or a
// cache salt named name (kind keeps the two apart); 0 for an empty name.
func saltOf(kind, name string) uint64 {
	if name == "" {
		return 0
	}
	h := uint64(14695981039346656037)
	for _, s := range []string{kind, name} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
	}
	return h | 1
}

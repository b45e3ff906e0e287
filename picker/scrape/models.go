package scrape

import "slices"

// modelSet gathers the model_name values of one body. A worker names the
// same models scrape after scrape, so the set is checked against the
// previous result first and allocates only for names it has not seen.
type modelSet struct {
	prev     []string // the previous result, sorted
	seenPrev uint64   // bit i: prev[i] appeared; only the first 64 are tracked
	fresh    []string // names not in prev
}

func (ms *modelSet) add(l label) {
	if len(l.value) == 0 {
		return
	}
	if !l.escaped {
		for i, p := range ms.prev {
			if string(l.value) == p {
				ms.markPrev(i)
				return
			}
		}
		for _, f := range ms.fresh {
			if string(l.value) == f {
				return
			}
		}
	}
	v := labelValue(l)
	if i := slices.Index(ms.prev, v); i >= 0 {
		ms.markPrev(i)
		return
	}
	if !slices.Contains(ms.fresh, v) {
		ms.fresh = append(ms.fresh, v)
	}
}

// markPrev records that prev[i] appeared. Past the 64 tracked names it is
// kept as a fresh one.
func (ms *modelSet) markPrev(i int) {
	if i < 64 {
		ms.seenPrev |= 1 << i
	} else if !slices.Contains(ms.fresh, ms.prev[i]) {
		ms.fresh = append(ms.fresh, ms.prev[i])
	}
}

// result returns the sorted set: prev itself when the body named exactly
// the previous models.
func (ms *modelSet) result() []string {
	n := len(ms.prev)
	if len(ms.fresh) == 0 && n <= 64 && ms.seenPrev == uint64(1)<<n-1 {
		if n == 0 {
			return nil
		}
		return ms.prev
	}
	out := ms.fresh
	for i, p := range ms.prev {
		if i < 64 && ms.seenPrev&(1<<i) != 0 {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return out
}

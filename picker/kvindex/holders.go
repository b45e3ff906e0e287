package kvindex

// holders are the engines holding one block key, each with how many of its
// blocks map to the key. Almost every key has one holder, kept in place so
// that storing a block allocates nothing beyond the map's own growth; the
// others, when several engines hold the key, follow in more, behind a
// pointer so that the map's value stays at 16 bytes.
type holders struct {
	first holder // no blocks: none
	more  *[]holder
}

// engineBits is the bits of a holder's count word that name the engine.
const engineBits = 6

// maxCount bounds a holder's count: the blocks of one engine under one key,
// at most the blocks the index keeps for a worker.
const maxCount = 1<<(32-engineBits) - 1

// holder is an engine holding a block key under some of its server's hashes
// (one, unless two of its blocks have the same tokens after the same
// parent): the worker, and the engine's number in the low bits of a word
// whose high bits count the hashes. Eight bytes, where a worker, an engine
// and a count apart would take twelve and the holders sixteen more.
type holder struct {
	id uint32
	en uint32
}

func (h holder) src() src      { return src{id: h.id, engine: h.en & (MaxEngines - 1)} }
func (h holder) n() uint32     { return h.en >> engineBits }
func (h holder) is(s src) bool { return h.id == s.id && h.en&(MaxEngines-1) == s.engine }

// one is engine s holding the key under one hash.
func one(s src) holder { return holder{id: s.id, en: s.engine | 1<<engineBits} }

// add counts one more block of engine id under the key.
func (hs *holders) add(id src) {
	switch {
	case hs.first.n() == 0:
		hs.first = one(id)
		return
	case hs.first.is(id):
		hs.first.en += 1 << engineBits
		return
	}
	if hs.more == nil {
		hs.more = &[]holder{one(id)}
		return
	}
	for i := range *hs.more {
		if h := &(*hs.more)[i]; h.is(id) {
			h.en += 1 << engineBits
			return
		}
	}
	*hs.more = append(*hs.more, one(id))
}

// remove counts one block of engine id less under the key, and reports
// whether no engine holds it any more.
func (hs *holders) remove(id src) (empty bool) {
	if hs.first.n() != 0 && hs.first.is(id) {
		hs.first.en -= 1 << engineBits
		if hs.first.n() == 0 && hs.more != nil {
			more := *hs.more
			hs.first = more[len(more)-1]
			hs.setMore(more[:len(more)-1])
		}
		return hs.first.n() == 0
	}
	if hs.more == nil {
		return hs.first.n() == 0
	}
	more := *hs.more
	for i := range more {
		if !more[i].is(id) {
			continue
		}
		more[i].en -= 1 << engineBits
		if more[i].n() == 0 {
			last := len(more) - 1
			more[i] = more[last]
			hs.setMore(more[:last])
		}
		break
	}
	return hs.first.n() == 0
}

// setMore keeps more, or none when it is empty.
func (hs *holders) setMore(more []holder) {
	if len(more) == 0 {
		hs.more = nil
		return
	}
	*hs.more = more
}

// has reports whether engine id holds the key.
func (hs *holders) has(id src) bool {
	if hs.first.n() == 0 {
		return false
	}
	if hs.first.is(id) {
		return true
	}
	if hs.more != nil {
		for _, h := range *hs.more {
			if h.is(id) {
				return true
			}
		}
	}
	return false
}

// others returns the holders after the first.
func (hs *holders) others() []holder {
	if hs.more == nil {
		return nil
	}
	return *hs.more
}

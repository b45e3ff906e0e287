package kvindex

// holders are the engines holding one block key, each with how many of its
// blocks map to the key. Almost every key has one holder, kept in place so
// that storing a block allocates nothing beyond the map's own growth; the
// others, when several engines hold the key, follow in more, behind a
// pointer so that the map's value stays at 24 bytes.
type holders struct {
	first holder // n == 0: none
	more  *[]holder
}

// add counts one more block of engine id under the key.
func (hs *holders) add(id src) {
	switch {
	case hs.first.n == 0:
		hs.first = holder{src: id, n: 1}
		return
	case hs.first.src == id:
		hs.first.n++
		return
	}
	if hs.more == nil {
		hs.more = &[]holder{{src: id, n: 1}}
		return
	}
	for i := range *hs.more {
		if h := &(*hs.more)[i]; h.src == id {
			h.n++
			return
		}
	}
	*hs.more = append(*hs.more, holder{src: id, n: 1})
}

// remove counts one block of engine id less under the key, and reports
// whether no engine holds it any more.
func (hs *holders) remove(id src) (empty bool) {
	if hs.first.n != 0 && hs.first.src == id {
		hs.first.n--
		if hs.first.n == 0 && hs.more != nil {
			more := *hs.more
			hs.first = more[len(more)-1]
			hs.setMore(more[:len(more)-1])
		}
		return hs.first.n == 0
	}
	if hs.more == nil {
		return hs.first.n == 0
	}
	more := *hs.more
	for i := range more {
		if more[i].src != id {
			continue
		}
		more[i].n--
		if more[i].n == 0 {
			last := len(more) - 1
			more[i] = more[last]
			hs.setMore(more[:last])
		}
		break
	}
	return hs.first.n == 0
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
	if hs.first.n == 0 {
		return false
	}
	if hs.first.src == id {
		return true
	}
	if hs.more != nil {
		for _, h := range *hs.more {
			if h.src == id {
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

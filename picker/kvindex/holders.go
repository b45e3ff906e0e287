package kvindex

// holders are the engines holding one block key, each with how many of its
// blocks map to the key. Almost every key has one holder, kept in place so
// that storing a block allocates nothing beyond the map's own growth; the
// others, when several engines hold the key, follow in more.
type holders struct {
	first holder // n == 0: none
	more  []holder
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
	for i := range hs.more {
		if hs.more[i].src == id {
			hs.more[i].n++
			return
		}
	}
	hs.more = append(hs.more, holder{src: id, n: 1})
}

// remove counts one block of engine id less under the key, and reports
// whether no engine holds it any more.
func (hs *holders) remove(id src) (empty bool) {
	if hs.first.n != 0 && hs.first.src == id {
		hs.first.n--
		if hs.first.n == 0 {
			if last := len(hs.more) - 1; last >= 0 {
				hs.first = hs.more[last]
				hs.more = hs.more[:last]
			}
		}
		return hs.first.n == 0
	}
	for i := range hs.more {
		if hs.more[i].src != id {
			continue
		}
		hs.more[i].n--
		if hs.more[i].n == 0 {
			last := len(hs.more) - 1
			hs.more[i] = hs.more[last]
			hs.more = hs.more[:last]
		}
		break
	}
	return hs.first.n == 0
}

// has reports whether engine id holds the key.
func (hs *holders) has(id src) bool {
	if hs.first.n == 0 {
		return false
	}
	if hs.first.src == id {
		return true
	}
	for i := range hs.more {
		if hs.more[i].src == id {
			return true
		}
	}
	return false
}

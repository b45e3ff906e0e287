package kvindex

import "strconv"

// adapterTable numbers the adapter names blocks are stored under, so that
// each block the index keeps carries four bytes for its adapter instead of
// a string header. A name keeps its number while any worker holds a block
// stored under it; a number freed is given to the next new name.
type adapterTable struct {
	ids    map[string]uint32
	names  []string
	blocks []int // by number: blocks held under the name
	free   []uint32
}

func newAdapterTable() adapterTable { return adapterTable{ids: map[string]uint32{}} }

// maxAdapters bounds the names numbered at once: a number has the bits of
// node.adapter below the copy count.
const maxAdapters = adapterBits + 1

// hold counts one more block stored under name and returns its number;
// false, counting nothing, for a new name while maxAdapters are numbered.
func (t *adapterTable) hold(name string) (uint32, bool) {
	id, ok := t.ids[name]
	if !ok {
		if n := len(t.free); n > 0 {
			id = t.free[n-1]
			t.free = t.free[:n-1]
			t.names[id] = name
		} else {
			if len(t.names) == maxAdapters {
				return 0, false
			}
			id = uint32(len(t.names))
			t.names = append(t.names, name)
			t.blocks = append(t.blocks, 0)
		}
		t.ids[name] = id
	}
	t.blocks[id]++
	return id, true
}

// holdAgain counts one more block under number id, which a block holds.
func (t *adapterTable) holdAgain(id uint32) { t.blocks[id]++ }

// drop counts one block stored under number id less, and frees the number
// with the name's last block.
func (t *adapterTable) drop(id uint32) {
	t.blocks[id]--
	if t.blocks[id] > 0 {
		return
	}
	delete(t.ids, t.names[id])
	t.names[id] = ""
	t.free = append(t.free, id)
}

// held reports whether any block is stored under name.
func (t *adapterTable) held(name string) bool {
	_, ok := t.ids[name]
	return ok
}

// loraIDNames are the names made of the numbers of adapters that events
// name by lora_id alone, made once for each number rather than for each
// event. The name is not UTF-8, and a request's model is, so no request
// names it. It keeps the names of maxLoraIDNames numbers at most, and
// forgets them all to make room: a server numbers adapters in the order it
// loads them, so those of adapters long unloaded go.
type loraIDNames map[int64]string

// maxLoraIDNames bounds the numbers loraIDNames keeps names for: far more
// adapters than a server keeps loaded at once.
const maxLoraIDNames = 256

func (m loraIDNames) name(id int64) string {
	if s, ok := m[id]; ok {
		return s
	}
	if len(m) >= maxLoraIDNames {
		clear(m)
	}
	s := "\xfflora_id " + strconv.FormatInt(id, 10)
	m[id] = s
	return s
}

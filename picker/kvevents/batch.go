// Package kvevents speaks vLLM's KV-cache events: the msgpack batches a
// model server publishes when blocks enter or leave its prefix cache
// (--kv-events-config), and the ZeroMQ (ZMTP 3) PUB/SUB sockets they travel
// on.
package kvevents

import (
	"errors"
	"fmt"
	"math"
)

// Kind is the kind of an event.
type Kind uint8

// The event kinds vLLM publishes.
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

var kindTags = map[string]Kind{
	"BlockStored":      BlockStored,
	"BlockRemoved":     BlockRemoved,
	"AllBlocksCleared": AllBlocksCleared,
}

func (k Kind) String() string {
	for s, v := range kindTags {
		if v == k {
			return s
		}
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Event is one KV-cache event. Block hashes given as bytes are folded to
// uint64 (FoldHash).
type Event struct {
	Kind      Kind
	Hashes    []uint64 // block_hashes, in order
	Parent    uint64   // parent_block_hash of a BlockStored, when HasParent
	HasParent bool
	TokenIDs  []uint32 // token_ids of a BlockStored: BlockSize per block
	BlockSize int
	LoraName  string // lora_name, "" when absent or nil
	LoraID    int64  // lora_id, when HasLora
	HasLora   bool
	Medium    string // "GPU", "CPU", ...; "" when absent or nil
	// Extra are the extra_keys of a BlockStored's blocks beyond the
	// adapter's name, for the blocks that have any, in block order.
	Extra []ExtraKeys
	// Group is the KV-cache group of the blocks (group_idx), when
	// HasGroup: a server of a hybrid model keeps one group per kind of
	// layer (full attention, sliding window, Mamba) and publishes each
	// group's blocks under the same hashes. SpecKind is the group's kind
	// (kv_cache_spec_kind) as a BlockStored names it, "" when absent.
	Group    int64
	HasGroup bool
	SpecKind string
}

// ExtraKeys is what a server mixes into one stored block's hash besides its
// tokens, its parent and its adapter's name: the cache salt of a prompt's
// first block, the identifiers of multimodal inputs, and the like (vLLM's
// BlockStored.extra_keys, one tuple per block, whose first item is the
// adapter's name when there is one). Raw holds the N items as msgpack, in
// their order.
type ExtraKeys struct {
	Block int // the block's place in the event's Hashes
	N     int
	Raw   []byte
}

// SaltKeys returns the extra keys of the first block of a text prompt sent
// with a cache salt: the salt alone (beyond the adapter's name).
func SaltKeys(salt string) ExtraKeys {
	return ExtraKeys{N: 1, Raw: appendStr(nil, salt)}
}

// Hash folds the keys into 64 bits (FNV-1a over the count and the bytes).
// Equal keys hash alike in every process.
func (x ExtraKeys) Hash() uint64 {
	h := fnv1a(x.Raw)
	h ^= uint64(x.N)
	return h * 1099511628211
}

// Batch is one published message's events.
type Batch struct {
	TS     float64
	DPRank int
	Events []Event
	// Skipped counts events of kinds this package does not know.
	Skipped int
}

// DecodeBatch decodes a batch in either shape vLLM has published: a map
// with events as maps tagged by "type" (msgspec structs), or arrays with the
// tag first (array_like structs). Unknown fields are skipped, and so are
// events of unknown kinds (counted in Skipped). dst's slices are reused.
func DecodeBatch(b []byte, dst *Batch) error {
	events := dst.Events[:0]
	*dst = Batch{}
	r := &reader{b: b}
	err := decodeBatch(r, dst, events)
	if err == nil && r.i != len(b) {
		err = errors.New("msgpack: data after the batch")
	}
	if err != nil {
		dst.Events = dst.Events[:0]
		return fmt.Errorf("KV event batch: %w", err)
	}
	return nil
}

func decodeBatch(r *reader, dst *Batch, events []Event) error {
	kind, n, err := r.container()
	if err != nil {
		return err
	}
	for i := range n {
		var key []byte // nil past the fields an array lists
		if kind == 'a' {
			if i < len(batchFields) {
				key = batchFields[i]
			}
		} else if key, err = r.bytes(); err != nil {
			return err
		}
		switch string(key) {
		case "ts":
			dst.TS, err = r.float()
		case "events":
			events, err = decodeEvents(r, dst, events)
		case "data_parallel_rank":
			dst.DPRank, err = intOrNil(r)
		default:
			err = r.skip(1)
		}
		if err != nil {
			return err
		}
	}
	dst.Events = events
	return nil
}

// batchFields are a batch's fields in declaration order, as an array_like
// struct lists them.
var batchFields = [...][]byte{[]byte("ts"), []byte("events"), []byte("data_parallel_rank")}

func decodeEvents(r *reader, dst *Batch, events []Event) ([]Event, error) {
	n, err := r.array()
	if err != nil {
		return events, err
	}
	for range n {
		// Reuse the slices of the event decoded here last time.
		var ev Event
		if len(events) < cap(events) {
			old := events[:len(events)+1][len(events)]
			ev.Hashes, ev.TokenIDs, ev.Extra = old.Hashes[:0], old.TokenIDs[:0], old.Extra[:0]
			if old.LoraName != "" {
				r.lora = old.LoraName
			}
		}
		known, err := decodeEvent(r, &ev)
		if err != nil {
			return events, err
		}
		if !known {
			dst.Skipped++
			continue
		}
		events = append(events, ev)
	}
	return events, nil
}

// decodeEvent decodes one event into ev, and reports false for an unknown
// kind.
func decodeEvent(r *reader, ev *Event) (bool, error) {
	kind, n, err := r.container()
	if err != nil {
		return false, err
	}
	if kind == 'a' {
		if n == 0 {
			return false, errors.New("msgpack: an event without its tag")
		}
		tag, err := r.bytes()
		if err != nil {
			return false, err
		}
		k, known := kindTags[string(tag)]
		ev.Kind = k
		fields := arrayFields[k]
		for i := 1; i < n; i++ {
			if !known || i > len(fields) {
				err = r.skip(1)
			} else {
				err = field(r, ev, fields[i-1])
			}
			if err != nil {
				return false, err
			}
		}
		return known, nil
	}
	known := false
	for range n {
		key, err := r.bytes()
		if err != nil {
			return false, err
		}
		if string(key) == "type" {
			tag, err := r.bytes()
			if err != nil {
				return false, err
			}
			ev.Kind, known = kindTags[string(tag)]
			continue
		}
		if err := field(r, ev, string(key)); err != nil {
			return false, err
		}
	}
	ev.keepFieldsOfKind()
	return known, nil
}

// keepFieldsOfKind clears what a map-shaped event carried that its kind
// does not have.
func (ev *Event) keepFieldsOfKind() {
	switch ev.Kind {
	case BlockStored:
		return
	case BlockRemoved:
		*ev = Event{Kind: ev.Kind, Hashes: ev.Hashes, Medium: ev.Medium, TokenIDs: ev.TokenIDs[:0], Group: ev.Group, HasGroup: ev.HasGroup}
	default:
		*ev = Event{Kind: ev.Kind, Hashes: ev.Hashes[:0], TokenIDs: ev.TokenIDs[:0]}
	}
}

// arrayFields are the fields of each kind in declaration order, as an
// array_like struct lists them after its tag.
var arrayFields = map[Kind][]string{
	BlockStored:  {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind"},
	BlockRemoved: {"block_hashes", "medium", "group_idx"},
}

// field decodes the named field into ev, skipping names it does not use.
func field(r *reader, ev *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		ev.Hashes, err = hashes(r, ev.Hashes[:0])
	case "parent_block_hash":
		if !r.nil() {
			ev.Parent, err = r.hash()
			ev.HasParent = true
		}
	case "token_ids":
		ev.TokenIDs, err = tokens(r, ev.TokenIDs[:0])
	case "block_size":
		ev.BlockSize, err = intOrNil(r)
	case "lora_id":
		ev.LoraID, ev.HasLora, err = optInt(r)
	case "medium":
		ev.Medium, err = r.oneOf(media)
	case "lora_name":
		ev.LoraName, err = r.name()
	case "extra_keys":
		ev.Extra, err = extraKeys(r, ev.Extra[:0], ev.LoraName)
	case "group_idx":
		ev.Group, ev.HasGroup, err = optInt(r)
	case "kv_cache_spec_kind":
		ev.SpecKind, err = r.oneOf(specKinds)
	default:
		err = r.skip(1)
	}
	return err
}

// extraKeys reads extra_keys: nil, or per block nil or an array of items.
// A first item that is the adapter's name (read before, as both of vLLM's
// shapes list lora_name first) is left out: the adapter keys every block
// already. Blocks left with no items are left out.
func extraKeys(r *reader, dst []ExtraKeys, lora string) ([]ExtraKeys, error) {
	if r.nil() {
		return dst, nil
	}
	n, err := r.array()
	if err != nil {
		return dst, err
	}
	for block := range n {
		if r.nil() {
			continue
		}
		items, err := r.array()
		if err != nil {
			return dst, err
		}
		start := r.i
		for j := range items {
			if j == 0 && lora != "" && r.isStr(lora) {
				items--
				start = r.i
				continue
			}
			if err := r.skip(1); err != nil {
				return dst, err
			}
		}
		if items > 0 {
			dst = append(dst, ExtraKeys{Block: block, N: items, Raw: append([]byte(nil), r.b[start:r.i]...)})
		}
	}
	return dst, nil
}

func hashes(r *reader, dst []uint64) ([]uint64, error) {
	n, err := r.array()
	if err != nil {
		return dst, err
	}
	for range n {
		h, err := r.hash()
		if err != nil {
			return dst, err
		}
		dst = append(dst, h)
	}
	return dst, nil
}

func tokens(r *reader, dst []uint32) ([]uint32, error) {
	n, err := r.array()
	if err != nil {
		return dst, err
	}
	for range n {
		v, err := r.int()
		if err != nil {
			return dst, err
		}
		if v > math.MaxUint32 {
			return dst, fmt.Errorf("msgpack: token id %d out of range", int64(v))
		}
		dst = append(dst, uint32(v))
	}
	return dst, nil
}

// optInt reads an int, or nil as none.
func optInt(r *reader) (v int64, ok bool, err error) {
	if r.nil() {
		return 0, false, nil
	}
	u, err := r.int()
	return int64(u), true, err
}

// intOrNil reads an int that fits an int, or nil as 0.
func intOrNil(r *reader) (int, error) {
	if r.nil() {
		return 0, nil
	}
	v, err := r.int()
	if err == nil && (int64(v) > math.MaxInt32 || int64(v) < math.MinInt32) {
		err = fmt.Errorf("msgpack: %d out of range", int64(v))
	}
	return int(int64(v)), err
}

package kvevents

import (
	"math"
)

// AppendBatch appends src to dst in the shape current vLLM publishes: the
// batch a map of ts, events and data_parallel_rank; each event a map whose
// "type" comes first. parent_block_hash, lora_id and medium are written as
// nil when absent, lora_name is omitted when empty, extra_keys is written
// when an adapter or Extra gives a block any (the adapter's name first in
// each block's, as vLLM lists it), and group_idx and kv_cache_spec_kind
// when the event has them. Skipped is not encoded.
func AppendBatch(dst []byte, src *Batch) []byte {
	dst = append(dst, 0x83)
	dst = appendStr(dst, "ts")
	dst = append(dst, 0xcb)
	dst = appendUint(dst, math.Float64bits(src.TS), 8)
	dst = appendStr(dst, "events")
	dst = appendArrayHeader(dst, len(src.Events))
	for i := range src.Events {
		dst = appendEvent(dst, &src.Events[i])
	}
	dst = appendStr(dst, "data_parallel_rank")
	return appendInt(dst, int64(src.DPRank))
}

func appendEvent(dst []byte, ev *Event) []byte {
	switch ev.Kind {
	case BlockStored:
		n := 7
		if ev.LoraName != "" {
			n += 2 // lora_name and extra_keys
		} else if len(ev.Extra) > 0 {
			n++
		}
		if ev.HasGroup {
			n++
		}
		if ev.SpecKind != "" {
			n++
		}
		dst = append(dst, 0x80|byte(n))
		dst = appendTag(dst, ev.Kind)
		dst = appendHashes(dst, ev.Hashes)
		dst = appendStr(dst, "parent_block_hash")
		if ev.HasParent {
			dst = appendUintValue(dst, ev.Parent)
		} else {
			dst = append(dst, 0xc0)
		}
		dst = appendStr(dst, "token_ids")
		dst = appendArrayHeader(dst, len(ev.TokenIDs))
		for _, t := range ev.TokenIDs {
			dst = appendUintValue(dst, uint64(t))
		}
		dst = appendStr(dst, "block_size")
		dst = appendInt(dst, int64(ev.BlockSize))
		dst = appendStr(dst, "lora_id")
		if ev.HasLora {
			dst = appendInt(dst, ev.LoraID)
		} else {
			dst = append(dst, 0xc0)
		}
		dst = appendMedium(dst, ev.Medium)
		if ev.LoraName != "" {
			dst = appendStr(dst, "lora_name")
			dst = appendStr(dst, ev.LoraName)
		}
		if ev.LoraName != "" || len(ev.Extra) > 0 {
			dst = appendExtraKeys(dst, ev)
		}
		dst = appendGroup(dst, ev)
		if ev.SpecKind != "" {
			dst = appendStr(dst, "kv_cache_spec_kind")
			dst = appendStr(dst, ev.SpecKind)
		}
	case BlockRemoved:
		n := byte(3)
		if ev.HasGroup {
			n++
		}
		dst = append(dst, 0x80|n)
		dst = appendTag(dst, ev.Kind)
		dst = appendHashes(dst, ev.Hashes)
		dst = appendMedium(dst, ev.Medium)
		dst = appendGroup(dst, ev)
	default:
		dst = append(dst, 0x81)
		dst = appendTag(dst, ev.Kind)
	}
	return dst
}

// appendExtraKeys writes extra_keys: one entry per block (and up to the
// last block Extra names, should it name more), nil for a block with none.
func appendExtraKeys(dst []byte, ev *Event) []byte {
	dst = appendStr(dst, "extra_keys")
	blocks := len(ev.Hashes)
	if n := len(ev.Extra); n > 0 {
		blocks = max(blocks, ev.Extra[n-1].Block+1)
	}
	dst = appendArrayHeader(dst, blocks)
	x := ev.Extra
	for i := range blocks {
		var keys ExtraKeys
		if len(x) > 0 && x[0].Block == i {
			keys, x = x[0], x[1:]
		}
		n := keys.N
		if ev.LoraName != "" {
			n++
		}
		if n == 0 {
			dst = append(dst, 0xc0)
			continue
		}
		dst = appendArrayHeader(dst, n)
		if ev.LoraName != "" {
			dst = appendStr(dst, ev.LoraName)
		}
		dst = append(dst, keys.Raw...)
	}
	return dst
}

func appendTag(dst []byte, k Kind) []byte {
	dst = appendStr(dst, "type")
	return appendStr(dst, k.String())
}

func appendHashes(dst []byte, hs []uint64) []byte {
	dst = appendStr(dst, "block_hashes")
	dst = appendArrayHeader(dst, len(hs))
	for _, h := range hs {
		dst = appendUintValue(dst, h)
	}
	return dst
}

// appendGroup writes group_idx when the event has one.
func appendGroup(dst []byte, ev *Event) []byte {
	if !ev.HasGroup {
		return dst
	}
	dst = appendStr(dst, "group_idx")
	return appendInt(dst, ev.Group)
}

func appendMedium(dst []byte, m string) []byte {
	dst = appendStr(dst, "medium")
	if m == "" {
		return append(dst, 0xc0)
	}
	return appendStr(dst, m)
}

func appendStr(dst []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = appendUint(append(dst, 0xda), uint64(n), 2)
	default:
		dst = appendUint(append(dst, 0xdb), uint64(n), 4)
	}
	return append(dst, s...)
}

func appendArrayHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return appendUint(append(dst, 0xdc), uint64(n), 2)
	}
	return appendUint(append(dst, 0xdd), uint64(n), 4)
}

// appendUintValue appends v as an unsigned integer, as small as it fits.
func appendUintValue(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return appendUint(append(dst, 0xcd), v, 2)
	case v <= math.MaxUint32:
		return appendUint(append(dst, 0xce), v, 4)
	}
	return appendUint(append(dst, 0xcf), v, 8)
}

func appendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUintValue(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(v))
	case v >= math.MinInt16:
		return appendUint(append(dst, 0xd1), uint64(v), 2)
	case v >= math.MinInt32:
		return appendUint(append(dst, 0xd2), uint64(v), 4)
	}
	return appendUint(append(dst, 0xd3), uint64(v), 8)
}

package kvevents

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func sampleBatch() Batch {
	return Batch{TS: 1733356800.25, DPRank: 1, Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{7, math.MaxUint64}, TokenIDs: []uint32{1, 2, 3, 4, 70000, 6, 7, 8},
			BlockSize: 4, Medium: "GPU"},
		{Kind: BlockStored, Hashes: []uint64{9}, Parent: math.MaxUint64, HasParent: true, TokenIDs: []uint32{9, 10, 11, 12},
			BlockSize: 4, LoraName: "sql", LoraID: 2, HasLora: true, Medium: "GPU"},
		{Kind: BlockStored, Hashes: []uint64{5, 6}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, LoraName: "sql",
			LoraID: 2, HasLora: true, Medium: "GPU", Extra: []ExtraKeys{SaltKeys("tenant-a")}},
		{Kind: BlockStored, Hashes: []uint64{7, 9}, Medium: "CPU"}, // an offloading tier's copy: no tokens, no parent, block size 0
		{Kind: BlockRemoved, Hashes: []uint64{7}, Medium: "CPU"},
		{Kind: BlockStored, Hashes: []uint64{11}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, Medium: "GPU",
			Group: 1, HasGroup: true, SpecKind: "sliding_window"}, // a hybrid model's second group
		{Kind: BlockRemoved, Hashes: []uint64{11}, Medium: "GPU", Group: 1, HasGroup: true},
		{Kind: AllBlocksCleared},
	}}
}

var ignoreEmpty = cmpopts.EquateEmpty()

func TestAppendThenDecode(t *testing.T) {
	want := sampleBatch()
	var got Batch
	if err := DecodeBatch(AppendBatch(nil, &want), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, ignoreEmpty); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Decoding again into the same batch reuses it and gives the same.
	if err := DecodeBatch(AppendBatch(nil, &want), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, ignoreEmpty); diff != "" {
		t.Errorf("second decode (-want +got):\n%s", diff)
	}
}

// Batches decoded one after the other into one Batch name their adapters
// as each published them, whether a slot held the same name, another or
// none before.
func TestAdapterNamesAcrossBatches(t *testing.T) {
	stored := func(lora ...string) Batch {
		var b Batch
		for i, name := range lora {
			ev := Event{Kind: BlockStored, Hashes: []uint64{uint64(i + 1)}, TokenIDs: []uint32{1, 2}, BlockSize: 2}
			if name != "" {
				ev.LoraName, ev.LoraID, ev.HasLora = name, int64(len(name)), true
			}
			b.Events = append(b.Events, ev)
		}
		return b
	}
	var got Batch
	for _, want := range []Batch{
		stored("sql-lora", "sql-lora"),
		stored("sql-lora", "chat-lora", ""),
		stored("", "chat-lora", "sql-lora"),
		stored("chat-lora"),
	} {
		if err := DecodeBatch(AppendBatch(nil, &want), &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, ignoreEmpty); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	}
}

// w builds msgpack by hand for the shapes AppendBatch does not write.
type w []byte

func (b w) str(s string) w  { return appendStr(b, s) }
func (b w) uint(v uint64) w { return appendUintValue(b, v) }
func (b w) int(v int64) w   { return appendInt(b, v) }
func (b w) arr(n int) w     { return appendArrayHeader(b, n) }
func (b w) raw(x ...byte) w { return append(b, x...) }
func (b w) bin(x []byte) w  { return append(append(b, 0xc4, byte(len(x))), x...) }
func (b w) f32(v float32) w { return appendUint(append(b, 0xca), uint64(math.Float32bits(v)), 4) }
func (b w) tokens(ts ...int) w {
	b = b.arr(len(ts))
	for _, t := range ts {
		b = b.uint(uint64(t))
	}
	return b
}

func TestDecodeShapes(t *testing.T) {
	digest := []byte("0123456789abcdef0123456789abcdef")
	cases := map[string]struct {
		in   w
		want Batch
	}{
		"array form of older vLLM": {
			in: w{}.arr(3).f32(2.5).arr(3).
				arr(7).str("BlockStored").arr(1).int(-5).raw(0xc0).tokens(1, 2).uint(2).raw(0xc0).str("GPU").
				arr(3).str("BlockRemoved").arr(1).int(-5).raw(0xc0).
				arr(1).str("AllBlocksCleared").
				raw(0xc0),
			want: Batch{TS: 2.5, Events: []Event{
				{Kind: BlockStored, Hashes: []uint64{uint64(math.MaxUint64 - 4)}, TokenIDs: []uint32{1, 2}, BlockSize: 2, Medium: "GPU"},
				{Kind: BlockRemoved, Hashes: []uint64{uint64(math.MaxUint64 - 4)}},
				{Kind: AllBlocksCleared},
			}},
		},
		"array form with fewer and more fields": {
			in: w{}.arr(2).uint(3).arr(2).
				arr(5).str("BlockStored").arr(0).raw(0xc0).tokens().uint(16).
				arr(5).str("BlockRemoved").arr(0).str("GPU").uint(1).uint(9), // group_idx, then a field not known
			want: Batch{TS: 3, Events: []Event{{Kind: BlockStored, BlockSize: 16}, {Kind: BlockRemoved, Medium: "GPU", Group: 1, HasGroup: true}}},
		},
		"array form with an adapter's extra keys and a cache salt": {
			// vLLM lists the adapter's name first in every block's extra
			// keys, and the salt after it in the first block's.
			in: w{}.arr(3).f32(1).arr(1).
				arr(9).str("BlockStored").arr(3).uint(1).uint(2).uint(3).raw(0xc0).tokens(1, 2, 3).uint(1).uint(4).str("GPU").str("sql").
				arr(3).arr(2).str("sql").str("tenant-a").arr(1).str("sql").raw(0xc0).
				raw(0xc0),
			want: Batch{TS: 1, Events: []Event{{Kind: BlockStored, Hashes: []uint64{1, 2, 3}, TokenIDs: []uint32{1, 2, 3}, BlockSize: 1,
				LoraID: 4, HasLora: true, Medium: "GPU", LoraName: "sql", Extra: []ExtraKeys{SaltKeys("tenant-a")}}}},
		},
		"array form, extra keys without an adapter: a salt and a multimodal input": {
			in: w{}.arr(2).f32(1).arr(1).
				arr(9).str("BlockStored").arr(2).uint(1).uint(2).raw(0xc0).tokens(1, 2).uint(1).raw(0xc0).str("GPU").raw(0xc0).
				arr(2).arr(1).str("tenant-a").arr(2).str("image-hash").uint(7),
			want: Batch{TS: 1, Events: []Event{{Kind: BlockStored, Hashes: []uint64{1, 2}, TokenIDs: []uint32{1, 2}, BlockSize: 1,
				Medium: "GPU", Extra: []ExtraKeys{SaltKeys("tenant-a"), {Block: 1, N: 2, Raw: w{}.str("image-hash").uint(7)}}}}},
		},
		"map form, bytes hashes, keys in any order, unknown ones skipped": {
			in: w{}.raw(0x83).str("events").arr(1).
				raw(0x88).str("kv_cache_spec_kind").str("sliding_window").str("token_ids").tokens(5).str("extra_keys").arr(1).arr(2).str("salt").raw(0xc3).
				str("group_idx").uint(0).str("block_hashes").arr(1).bin(digest).str("type").str("BlockStored").
				str("parent_block_hash").bin(digest[:8]).str("block_size").uint(1).
				str("future").raw(0x81).str("k").raw(0xcb, 0, 0, 0, 0, 0, 0, 0, 0).
				str("ts").raw(0xcb, 0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18),
			want: Batch{TS: math.Pi, Events: []Event{{Kind: BlockStored, Hashes: []uint64{FoldHash(digest)},
				Parent: FoldHash(digest[:8]), HasParent: true, TokenIDs: []uint32{5}, BlockSize: 1,
				Extra: []ExtraKeys{{N: 2, Raw: w{}.str("salt").raw(0xc3)}}, HasGroup: true, SpecKind: "sliding_window"}}},
		},
		"unknown kinds are skipped": {
			in: w{}.raw(0x82).str("ts").uint(1).str("events").arr(2).
				raw(0x82).str("type").str("BlockMoved").str("block_hashes").arr(1).uint(1).
				arr(2).str("Spilled").uint(3),
			want: Batch{TS: 1, Skipped: 2},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got Batch
			if err := DecodeBatch(tc.in, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, ignoreEmpty); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A block hash sent as bytes reads as the int a server sends for it with
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (vLLM's default): the digest's low 64
// bits, big-endian. An offloading tier publishes the bytes of the hashes
// its GPU pool publishes as ints, and both name the same blocks.
func TestBytesHashesReadAsTheServersInts(t *testing.T) {
	digest := []byte("0123456789abcdef0123456789abcdef")
	cases := map[string]struct {
		hash []byte
		want uint64
	}{
		"a sha256 digest: its last 8 bytes": {hash: digest, want: 0x3839616263646566},
		"8 bytes":                           {hash: digest[:8], want: 0x3031323334353637},
		"shorter: the bytes as a number":    {hash: []byte{1, 2, 3}, want: 0x010203},
		"empty":                             {hash: []byte{}, want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := w{}.raw(0x82).str("ts").uint(1).str("events").arr(2).
				raw(0x83).str("type").str("BlockStored").str("block_hashes").arr(1).bin(tc.hash).
				str("parent_block_hash").bin(tc.hash).
				raw(0x82).str("type").str("BlockRemoved").str("block_hashes").arr(1).bin(tc.hash)
			var got Batch
			if err := DecodeBatch(in, &got); err != nil {
				t.Fatal(err)
			}
			want := Batch{TS: 1, Events: []Event{
				{Kind: BlockStored, Hashes: []uint64{tc.want}, Parent: tc.want, HasParent: true},
				{Kind: BlockRemoved, Hashes: []uint64{tc.want}},
			}}
			if diff := cmp.Diff(want, got, ignoreEmpty); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	good := AppendBatch(nil, &Batch{Events: sampleBatch().Events})
	cases := map[string][]byte{
		"empty":                        {},
		"not a container":              w{}.uint(1),
		"truncated":                    good[:len(good)-3],
		"trailing data":                append(append([]byte{}, good...), 0xc0),
		"array length past the input":  w{}.raw(0xdd, 0xff, 0xff, 0xff, 0xff),
		"string length past the input": w{}.raw(0x81, 0xdb, 0x7f, 0xff, 0xff, 0xff),
		"hashes not an array":          w{}.raw(0x81).str("events").arr(1).raw(0x82).str("type").str("BlockStored").str("block_hashes").uint(1),
		"token id out of range":        w{}.arr(2).uint(0).arr(1).arr(4).str("BlockStored").arr(0).raw(0xc0).arr(1).raw(0xcf, 1, 0, 0, 0, 0, 0, 0, 0),
		"event without tag":            w{}.arr(2).uint(0).arr(1).arr(0),
		"tag not a string":             w{}.arr(2).uint(0).arr(1).arr(1).uint(3),
		"unknown type byte":            w{}.raw(0x81).str("x").raw(0xc1),
	}
	deep := w{}.raw(0x81).str("x")
	for range 40 {
		deep = deep.arr(1)
	}
	cases["nested too deep"] = append(deep, 0xc0)
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			var got Batch
			if err := DecodeBatch(in, &got); err == nil {
				t.Errorf("no error; decoded %+v", got)
			}
			if len(got.Events) != 0 {
				t.Errorf("events left after an error: %+v", got.Events)
			}
		})
	}
}

func FuzzDecodeBatch(f *testing.F) {
	b := sampleBatch()
	f.Add(AppendBatch(nil, &b))
	f.Add([]byte(w{}.arr(3).f32(2.5).arr(2).
		arr(7).str("BlockStored").arr(1).int(-5).raw(0xc0).tokens(1, 2).uint(2).raw(0xc0).str("GPU").
		arr(3).str("BlockRemoved").arr(1).int(-5).raw(0xc0).raw(0xc0)))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got Batch
		if err := DecodeBatch(data, &got); err != nil {
			return
		}
		var again Batch
		if err := DecodeBatch(AppendBatch(nil, &got), &again); err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		opts := []cmp.Option{ignoreEmpty, cmpopts.IgnoreFields(Batch{}, "Skipped"), cmpopts.EquateNaNs()}
		if diff := cmp.Diff(got, again, opts...); diff != "" {
			t.Fatalf("re-encoded batch differs (-first +again):\n%s", diff)
		}
	})
}

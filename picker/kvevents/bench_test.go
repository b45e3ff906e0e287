package kvevents

import "testing"

// BenchmarkDecodeBatch decodes one step's batch as vLLM publishes it: a
// BlockStored of 128 blocks of 16 tokens, for the base model, for an
// adapter (whose name vLLM lists in every block's extra keys) and for a
// salted prompt (the salt in its first block's), into a reused Batch.
func BenchmarkDecodeBatch(b *testing.B) {
	tokens := make([]uint32, 128*16)
	hashes := make([]uint64, 128)
	for i := range tokens {
		tokens[i] = uint32(i * 7919 % 150000)
	}
	for i := range hashes {
		hashes[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	cases := []struct {
		name string
		ev   Event
	}{
		{"base", Event{Kind: BlockStored, Hashes: hashes, TokenIDs: tokens, BlockSize: 16, Medium: "GPU"}},
		{"adapter", Event{Kind: BlockStored, Hashes: hashes, TokenIDs: tokens, BlockSize: 16, Medium: "GPU",
			LoraName: "sql-lora", LoraID: 1, HasLora: true}},
		{"salted", Event{Kind: BlockStored, Hashes: hashes, TokenIDs: tokens, BlockSize: 16, Medium: "GPU",
			Extra: []ExtraKeys{SaltKeys("tenant-0123456789")}}},
	}
	for i := range cases {
		bc := &cases[i]
		msg := AppendBatch(nil, &Batch{TS: 1, Events: []Event{bc.ev}})
		b.Run(bc.name, func(b *testing.B) {
			var got Batch
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				if err := DecodeBatch(msg, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

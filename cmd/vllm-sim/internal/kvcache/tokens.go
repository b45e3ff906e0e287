// Package kvcache models vLLM's automatic prefix cache: prompts are cut into
// fixed-size blocks of tokens, every full block is identified by a hash that
// chains in its parent's hash, and a bounded pool of GPU blocks keeps the
// blocks of finished requests around until the space is needed again.
//
// The simulator has no real tokenizer. Its rule is fixed: every BytesPerToken
// bytes of prompt text are one token, and a trailing remainder is one more.
// A token's id is its bytes read as a little-endian uint32, a trailing
// partial token padded with zeros (TokenIDs).
package kvcache

// BytesPerToken is how many bytes of text make one simulated token.
const BytesPerToken = 4

// fnv-1a parameters (64 bit).
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

// NumTokens returns the number of simulated tokens in text.
func NumTokens(text string) int {
	return (len(text) + BytesPerToken - 1) / BytesPerToken
}

// BlockHashes returns the chained hashes of the full blocks of text, one per
// blockSize tokens, in prompt order. A partial last block has no hash: vLLM
// caches full blocks only. Two texts share the first k hashes exactly when
// their first k blocks are byte-identical.
func BlockHashes(text string, blockSize int) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	blockBytes := blockSize * BytesPerToken
	n := len(text) / blockBytes
	hashes := make([]uint64, n)
	var parent uint64
	for i := range n {
		h := fnvOffset
		for shift := 0; shift < 64; shift += 8 {
			h ^= (parent >> shift) & 0xff
			h *= fnvPrime
		}
		for _, b := range []byte(text[i*blockBytes : (i+1)*blockBytes]) {
			h ^= uint64(b)
			h *= fnvPrime
		}
		hashes[i] = h
		parent = h
	}
	return hashes
}

// TokenIDs appends the ids of text's tokens to dst and returns the
// extended slice: each token's BytesPerToken bytes read as a little-endian
// uint32, a trailing partial token padded with zeros. It appends
// NumTokens(text) ids.
//
// TokenIDs is reversible for full tokens: writing each id back as 4
// little-endian bytes gives the text. Only a partial last token loses its
// length (its padding reads as NUL bytes).
func TokenIDs(text string, dst []uint32) []uint32 {
	for text != "" {
		var id uint32
		n := min(len(text), BytesPerToken)
		for i := n - 1; i >= 0; i-- {
			id = id<<8 | uint32(text[i])
		}
		dst = append(dst, id)
		text = text[n:]
	}
	return dst
}

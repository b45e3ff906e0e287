package prefix

import (
	"encoding/binary"
	"math/bits"
)

// BlockSize is the number of prompt bytes in one indexed block. A trailing
// partial block is not indexed.
const BlockSize = 64

// Mixing constants: odd 64-bit values with well-spread bits.
const (
	k0 = 0xa0761d6478bd642f
	k1 = 0xe7037ed1a0b428db
	k2 = 0x8ebc6af09c88c6e3
	k3 = 0x589965cc75374cc3
	k4 = 0x1d8e4e27c47d124f
)

// mix folds the 128-bit product of a and b into 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// hashBlock hashes one block under seed. The four lanes are independent so
// the multiplications overlap; the seed enters every lane, which is what
// chains a block's hash to everything before it.
func hashBlock(seed uint64, b *[BlockSize]byte) uint64 {
	le := binary.LittleEndian
	a := mix(le.Uint64(b[0:])^k1, le.Uint64(b[8:])^seed)
	c := mix(le.Uint64(b[16:])^k2, le.Uint64(b[24:])^seed^k0)
	d := mix(le.Uint64(b[32:])^k3, le.Uint64(b[40:])^seed^k1)
	e := mix(le.Uint64(b[48:])^k4, le.Uint64(b[56:])^seed^k2)
	return mix(a^c^k0, d^e^seed^k3)
}

// hashString hashes s of any length under seed; a string and a byte slice
// of the same bytes hash alike.
func hashString[S string | []byte](seed uint64, s S) uint64 {
	var buf [BlockSize]byte
	h := seed ^ k4
	rest := s
	for len(rest) > BlockSize {
		copy(buf[:], rest[:BlockSize])
		h = hashBlock(h, &buf)
		rest = rest[BlockSize:]
	}
	buf = [BlockSize]byte{}
	copy(buf[:], rest)
	h = hashBlock(h, &buf)
	return mix(h^uint64(len(s)), k0)
}

// seed is where a prompt's hash chain starts: the index's secret key, the
// model and the cache salt, so that different models or salts never share a
// block.
func (ix *Index) seed(model, salt string) uint64 {
	h := hashString(ix.key, model)
	return hashString(h^k2, salt)
}

// Hashes returns the chained hashes of the prompt's full blocks, appended to
// dst[:0]. The prompt is the concatenation of its segments: a block may span
// segment boundaries, and the segments are never copied as a whole. Hash i
// covers blocks 0..i, so two prompts share hash i exactly when (barring
// collisions) their first (i+1)×BlockSize bytes are equal.
func (ix *Index) Hashes(dst []uint64, model, salt string, prompt [][]byte) []uint64 {
	dst = dst[:0]
	h := ix.seed(model, salt)
	var buf [BlockSize]byte
	pending := 0 // bytes pending in buf
	for _, seg := range prompt {
		for len(seg) > 0 {
			if pending == 0 && len(seg) >= BlockSize {
				h = hashBlock(h, (*[BlockSize]byte)(seg))
				seg = seg[BlockSize:]
			} else {
				c := copy(buf[pending:], seg)
				pending += c
				seg = seg[c:]
				if pending < BlockSize {
					continue
				}
				h = hashBlock(h, &buf)
				pending = 0
			}
			dst = append(dst, h)
		}
	}
	return dst
}

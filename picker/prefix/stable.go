package prefix

// stableKey starts the stable hashes. It is public on purpose: every picker
// replica must compute the same value for the same prompt, so unlike the
// index's chains these hashes carry no per-process secret. They only place
// work (a colliding prompt shares a home, within the bounded load), they
// never decide what is cached.
const stableKey = 0x3c6ef372fe94f82b

// StableHash hashes the model, the cache salt and the first blocks full
// blocks of the prompt (fewer when the prompt has fewer), the same way in
// every process. It returns the hash and the number of blocks hashed; a
// prompt shorter than one block hashes none and returns 0, 0.
func StableHash(model, salt string, prompt [][]byte, blocks int) (uint64, int) {
	h := hashString(hashString(stableKey, model)^k2, salt)
	var buf [BlockSize]byte
	n, done := 0, 0 // bytes pending in buf, blocks hashed
	for _, seg := range prompt {
		for len(seg) > 0 && done < blocks {
			c := copy(buf[n:], seg)
			n += c
			seg = seg[c:]
			if n == BlockSize {
				h = hashBlock(h, &buf)
				n = 0
				done++
			}
		}
	}
	if done == 0 {
		return 0, 0
	}
	return mix(h^uint64(done), k0), done
}

// StableString hashes s the same way in every process: the identity of a
// worker, for rendezvous hashing.
func StableString(s string) uint64 { return hashString(stableKey, s) }

// StableBytes is StableString of b's bytes, read in place: a session id
// as it came in a header, for rendezvous hashing.
func StableBytes(b []byte) uint64 { return hashString(stableKey, b) }

// Rendezvous is the weight of the pair (key, worker) in highest-random-weight
// hashing: each key ranks the workers by it, independently of which other
// workers exist.
func Rendezvous(key, worker uint64) uint64 {
	z := key ^ (worker+k3)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

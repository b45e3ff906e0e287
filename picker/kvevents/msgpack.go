package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// maxDepth bounds the nesting of a value the decoder skips.
const maxDepth = 32

var errTruncated = errors.New("msgpack: truncated")

// reader reads msgpack values from b. Every length is checked against what
// is left before anything is read or allocated.
type reader struct {
	b []byte
	i int
	// lora is the adapter name decoded last into the event slot being
	// filled, or into the event before it: a name that repeats it is not
	// allocated again.
	lora string
}

func (r *reader) byte() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.i]
	r.i++
	return c, nil
}

func (r *reader) peek() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errTruncated
	}
	return r.b[r.i], nil
}

// take returns the next n bytes.
func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.i {
		return nil, errTruncated
	}
	s := r.b[r.i : r.i+n]
	r.i += n
	return s, nil
}

func (r *reader) uint(n int) (uint64, error) {
	s, err := r.take(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range s {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// nil reports whether the next value is nil, and consumes it if so.
func (r *reader) nil() bool {
	if c, err := r.peek(); err == nil && c == 0xc0 {
		r.i++
		return true
	}
	return false
}

// int reads an integer of any msgpack width, as a two's-complement uint64.
func (r *reader) int() (uint64, error) {
	c, err := r.byte()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		return uint64(c), nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), nil
	}
	switch c {
	case 0xcc:
		return r.uint(1)
	case 0xcd:
		return r.uint(2)
	case 0xce:
		return r.uint(4)
	case 0xcf:
		return r.uint(8)
	case 0xd0:
		v, err := r.uint(1)
		return uint64(int64(int8(v))), err
	case 0xd1:
		v, err := r.uint(2)
		return uint64(int64(int16(v))), err
	case 0xd2:
		v, err := r.uint(4)
		return uint64(int64(int32(v))), err
	case 0xd3:
		return r.uint(8)
	}
	return 0, fmt.Errorf("msgpack: want an integer, got type byte %#x", c)
}

// float reads a float or an integer as a float64.
func (r *reader) float() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		r.i++
		v, err := r.uint(4)
		return float64(math.Float32frombits(uint32(v))), err
	case 0xcb:
		r.i++
		v, err := r.uint(8)
		return math.Float64frombits(v), err
	}
	if c >= 0xd0 && c <= 0xd3 || c >= 0xe0 {
		v, err := r.int()
		return float64(int64(v)), err
	}
	v, err := r.int()
	return float64(v), err
}

// strLen reads the header of a str or bin and returns its length.
func (r *reader) bytesLen() (int, error) {
	c, err := r.byte()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		return int(c & 0x1f), nil
	case c == 0xd9 || c == 0xc4:
		n, err = r.uint(1)
	case c == 0xda || c == 0xc5:
		n, err = r.uint(2)
	case c == 0xdb || c == 0xc6:
		n, err = r.uint(4)
	default:
		return 0, fmt.Errorf("msgpack: want a string, got type byte %#x", c)
	}
	return int(n), err
}

// bytes reads a str or bin.
func (r *reader) bytes() ([]byte, error) {
	n, err := r.bytesLen()
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

// isStr reports whether the next value is the str s, and consumes it if so.
func (r *reader) isStr(s string) bool {
	at := r.i
	if c, err := r.peek(); err != nil || c < 0xa0 || c > 0xbf && (c < 0xd9 || c > 0xdb) {
		return false
	}
	if b, err := r.bytes(); err == nil && string(b) == s {
		return true
	}
	r.i = at
	return false
}

// oneOf reads a str or nil (""): one of names, not allocated, or another
// name.
func (r *reader) oneOf(names []string) (string, error) {
	if r.nil() {
		return "", nil
	}
	b, err := r.bytes()
	for _, n := range names {
		if string(b) == n {
			return n, err
		}
	}
	return string(b), err
}

// media are the media vLLM names an event's blocks are in.
var media = []string{"GPU", "CPU"}

// specKinds are the kinds of KV-cache group vLLM names.
var specKinds = []string{"full_attention", "mla_attention", "sink_full_attention", "sliding_window",
	"sliding_window_mla", "chunked_local_attention", "mamba", "encoder_only_attention", "cross_attention"}

// name reads an adapter's name, a str or nil (""), reusing r.lora when it
// is the same and keeping it there for the next event.
func (r *reader) name() (string, error) {
	if r.nil() {
		return "", nil
	}
	b, err := r.bytes()
	if err != nil {
		return "", err
	}
	if string(b) != r.lora {
		r.lora = string(b)
	}
	return r.lora, nil
}

// container reads an array or map header (kind 'a' or 'm') and its length.
// A length over what is left is refused: every element takes a byte.
func (r *reader) container() (kind byte, n int, err error) {
	c, err := r.byte()
	if err != nil {
		return 0, 0, err
	}
	var v uint64
	switch {
	case c >= 0x90 && c <= 0x9f:
		kind, v = 'a', uint64(c&0x0f)
	case c >= 0x80 && c <= 0x8f:
		kind, v = 'm', uint64(c&0x0f)
	case c == 0xdc:
		kind = 'a'
		v, err = r.uint(2)
	case c == 0xdd:
		kind = 'a'
		v, err = r.uint(4)
	case c == 0xde:
		kind = 'm'
		v, err = r.uint(2)
	case c == 0xdf:
		kind = 'm'
		v, err = r.uint(4)
	default:
		return 0, 0, fmt.Errorf("msgpack: want an array or a map, got type byte %#x", c)
	}
	if err != nil {
		return 0, 0, err
	}
	per := uint64(1)
	if kind == 'm' {
		per = 2
	}
	if v > uint64(len(r.b)-r.i)/per {
		return 0, 0, errTruncated
	}
	return kind, int(v), nil
}

// array reads an array header.
func (r *reader) array() (int, error) {
	kind, n, err := r.container()
	if err == nil && kind != 'a' {
		err = errors.New("msgpack: want an array, got a map")
	}
	return n, err
}

// skip skips one value of any type.
func (r *reader) skip(depth int) error {
	if depth > maxDepth {
		return errors.New("msgpack: nested too deep")
	}
	c, err := r.peek()
	if err != nil {
		return err
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		r.i++
		return nil
	case c >= 0x80 && c <= 0x9f || c >= 0xdc && c <= 0xdf:
		kind, n, err := r.container()
		if err != nil {
			return err
		}
		if kind == 'm' {
			n *= 2
		}
		for range n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c >= 0xa0 && c <= 0xbf || c >= 0xc4 && c <= 0xc6 || c >= 0xd9 && c <= 0xdb:
		_, err := r.bytes()
		return err
	case c >= 0xcc && c <= 0xd3 || c == 0xca || c == 0xcb:
		_, err := r.float()
		return err
	}
	r.i++
	var n uint64 // extensions: fixext 1..16, ext 8/16/32 (type byte follows the length)
	switch c {
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		n = 1 << (c - 0xd4)
	case 0xc7:
		n, err = r.uint(1)
	case 0xc8:
		n, err = r.uint(2)
	case 0xc9:
		n, err = r.uint(4)
	default:
		return fmt.Errorf("msgpack: unknown type byte %#x", c)
	}
	if err != nil {
		return err
	}
	_, err = r.take(int(min(n+1, uint64(math.MaxInt32))))
	return err
}

// hash reads a block hash: an integer, or bytes folded by FoldHash.
func (r *reader) hash() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c >= 0xa0 && c <= 0xbf || c >= 0xc4 && c <= 0xc6 || c >= 0xd9 && c <= 0xdb {
		b, err := r.bytes()
		return FoldHash(b), err
	}
	return r.int()
}

// FoldHash folds a block hash given as bytes (vLLM's digests) into the
// uint64 the events carry: the bytes read as a big-endian number, of which
// the low 64 bits, as vLLM turns a digest into the int it publishes
// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, its default). So the bytes an
// offloading tier publishes (vLLM's OffloadingConnector sends its digests
// as they are) name the blocks its GPU pool published as ints. Bytes
// shorter than 8 are their big-endian value, as vLLM would read them.
func FoldHash(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b[len(b)-8:])
	}
	var h uint64
	for _, c := range b {
		h = h<<8 | uint64(c)
	}
	return h
}

// fnv1a is the 64-bit FNV-1a hash of b.
func fnv1a(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// appendUint appends n big-endian bytes of v.
func appendUint(dst []byte, v uint64, n int) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return append(dst, b[8-n:]...)
}

package kvcache

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNumTokens(t *testing.T) {
	cases := map[string]struct {
		text string
		want int
	}{
		"empty":            {text: "", want: 0},
		"one byte":         {text: "a", want: 1},
		"exactly one":      {text: "abcd", want: 1},
		"remainder rounds": {text: "abcde", want: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := NumTokens(tc.text); got != tc.want {
				t.Errorf("NumTokens(%q) = %d, want %d", tc.text, got, tc.want)
			}
		})
	}
}

func TestBlockHashes(t *testing.T) {
	const bs = 2 // 8 bytes a block
	base := BlockHashes("aaaaaaaabbbbbbbbcccccccc", bs)
	cases := map[string]struct {
		text       string
		wantLen    int
		wantShared int // leading hashes equal to base
	}{
		"same text":                {text: "aaaaaaaabbbbbbbbcccccccc", wantLen: 3, wantShared: 3},
		"partial block is dropped": {text: "aaaaaaaabbbbbbbbcccc", wantLen: 2, wantShared: 2},
		"diverges in block two":    {text: "aaaaaaaabbbbbbbXcccccccc", wantLen: 3, wantShared: 1},
		"chain: same block after a difference": {
			text: "Xaaaaaaabbbbbbbbcccccccc", wantLen: 3, wantShared: 0,
		},
		"shorter than a block": {text: "aaaa", wantLen: 0, wantShared: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := BlockHashes(tc.text, bs)
			shared := 0
			for shared < len(got) && shared < len(base) && got[shared] == base[shared] {
				shared++
			}
			if diff := cmp.Diff([2]int{tc.wantLen, tc.wantShared}, [2]int{len(got), shared}); diff != "" {
				t.Errorf("[len, shared] (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzBlockHashes(f *testing.F) {
	f.Add("hello world, this is a prompt", 2)
	f.Add(strings.Repeat("x", 100), 16)
	f.Add("", 1)
	f.Fuzz(func(t *testing.T, text string, blockSize int) {
		if blockSize <= 0 || blockSize > 1024 {
			if got := BlockHashes(text, blockSize); blockSize <= 0 && got != nil {
				t.Fatalf("BlockHashes with block size %d = %v, want nil", blockSize, got)
			}
			return
		}
		got := BlockHashes(text, blockSize)
		if want := len(text) / (blockSize * BytesPerToken); len(got) != want {
			t.Fatalf("got %d hashes, want %d", len(got), want)
		}
		// A prefix of the text gives a prefix of the hashes.
		half := BlockHashes(text[:len(text)/2], blockSize)
		if diff := cmp.Diff(got[:len(half)], half); diff != "" {
			t.Fatalf("prefix hashes differ (-full +half):\n%s", diff)
		}
	})
}

func TestTokenIDs(t *testing.T) {
	cases := map[string]struct {
		text string
		dst  []uint32
		want []uint32
	}{
		"empty":              {text: "", want: nil},
		"one full token":     {text: "abcd", want: []uint32{0x64636261}},
		"partial is padded":  {text: "abcdefg", want: []uint32{0x64636261, 0x00676665}},
		"one byte":           {text: "\xff", want: []uint32{0xff}},
		"appends to dst":     {text: "abcd", dst: []uint32{7}, want: []uint32{7, 0x64636261}},
		"high bytes":         {text: "\xff\xfe\xfd\xfc", want: []uint32{0xfcfdfeff}},
		"multi-byte runes":   {text: "héllo", want: []uint32{0x6ca9c368, 0x6f6c}},
		"zero bytes are ids": {text: "\x00\x00\x00\x00", want: []uint32{0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := TokenIDs(tc.text, tc.dst)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("TokenIDs(%q) (-want +got):\n%s", tc.text, diff)
			}
		})
	}
}

// textOf writes ids back as little-endian bytes.
func textOf(ids []uint32) string {
	b := make([]byte, 0, len(ids)*BytesPerToken)
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	return string(b)
}

func FuzzTokenIDs(f *testing.F) {
	f.Add("hello world, this is a prompt")
	f.Add("")
	f.Add("abc")
	f.Fuzz(func(t *testing.T, text string) {
		ids := TokenIDs(text, nil)
		if len(ids) != NumTokens(text) {
			t.Fatalf("%d ids, want NumTokens = %d", len(ids), NumTokens(text))
		}
		// Full tokens read back exactly; a partial one with zero padding.
		back := textOf(ids)
		full := len(text) / BytesPerToken * BytesPerToken
		if back[:full] != text[:full] {
			t.Fatalf("full tokens read back %q, want %q", back[:full], text[:full])
		}
		if tail := strings.TrimRight(back[full:], "\x00"); !strings.HasPrefix(text[full:], tail) {
			t.Fatalf("partial token read back %q, want a prefix of %q", tail, text[full:])
		}
	})
}

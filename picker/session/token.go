// Package session reads and writes the session token that keeps a client's
// requests on one pod: the standard base64 of the pod's namespace/name, as
// llm-d's session-affinity plugins (strategy encoded_endpoint_header) write
// it. The token is stateless: every picker replica decodes it alike, and no
// table of sessions grows with the clients.
package session

import (
	"encoding/base64"
	"errors"
	"strings"
)

// DefaultHeader is the header that carries the token when none is
// configured, llm-d's.
const DefaultHeader = "x-session-token"

// MaxRef is the longest namespace/name a token may name: a namespace of
// 63 bytes, the slash and a pod name of 253.
const MaxRef = 63 + 1 + 253

// maxToken is the longest token: the base64 of MaxRef bytes.
var maxToken = base64.StdEncoding.EncodedLen(MaxRef)

// Errors of Ref.Decode.
var (
	ErrEmpty   = errors.New("empty session token")
	ErrTooLong = errors.New("session token longer than any pod's namespace/name")
	ErrBase64  = errors.New("session token is not standard base64")
	ErrNoSlash = errors.New("session token does not name a namespace/name")
)

// Ref is the pod a token names, its namespace/name, decoded in place: a
// Ref held in a longer-lived value (a pooled request) costs no allocation.
// The zero value names no pod.
type Ref struct {
	b [MaxRef + 2]byte // base64 decodes whole quanta: room for the last one's spare bytes
	n uint16
}

// Decode sets r to the pod token names. On error r names no pod.
func (r *Ref) Decode(token []byte) error {
	r.n = 0
	switch {
	case len(token) == 0:
		return ErrEmpty
	case len(token) > maxToken:
		return ErrTooLong
	}
	n, err := base64.StdEncoding.Decode(r.b[:], token)
	switch {
	case err != nil:
		return ErrBase64
	case n > MaxRef:
		return ErrTooLong
	}
	for _, c := range r.b[:n] {
		if c == '/' {
			r.n = uint16(n)
			return nil
		}
	}
	return ErrNoSlash
}

// Set makes r name the pod namespace/name, which the caller knows fits
// (a registry endpoint's); a longer one leaves r naming no pod.
func (r *Ref) Set(namespace, name string) {
	r.n = 0
	if len(namespace)+1+len(name) > MaxRef {
		return
	}
	n := copy(r.b[:], namespace)
	r.b[n] = '/'
	n += 1 + copy(r.b[n+1:], name)
	r.n = uint16(n)
}

// Valid reports whether r names a pod.
func (r *Ref) Valid() bool { return r != nil && r.n > 0 }

// Reset makes r name no pod.
func (r *Ref) Reset() { r.n = 0 }

// Bytes is r's namespace/name; empty when it names no pod. It aliases r.
func (r *Ref) Bytes() []byte { return r.b[:r.n] }

// Is reports whether r names the pod namespace/name.
func (r *Ref) Is(namespace, name string) bool {
	b := r.b[:r.n]
	return len(b) == len(namespace)+1+len(name) && b[len(namespace)] == '/' &&
		string(b[:len(namespace)]) == namespace && string(b[len(namespace)+1:]) == name
}

// AppendToken appends the token of the pod namespace/name to dst.
func AppendToken(dst []byte, namespace, name string) []byte {
	var r Ref
	r.Set(namespace, name)
	return base64.StdEncoding.AppendEncode(dst, r.Bytes())
}

// ValidHeader reports whether s is a lower-case HTTP field name (an RFC
// 9110 token), as Envoy gives header names to the picker.
func ValidHeader(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

package extproc

import (
	"crypto/rand"
	"encoding/hex"
)

// RequestIDHeader identifies a request across the gateway, the picker and
// the model server. The gateway usually sets it; when it did not, the
// picker makes one and adds it to the request it routes.
const RequestIDHeader = "x-request-id"

// newRequestID returns a random (version 4) UUID.
func newRequestID() [36]byte {
	var u [16]byte
	_, _ = rand.Read(u[:]) // never fails (crypto/rand)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return b
}

package extproc

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// inbound is a stream's received message, decoded in place: each message
// of the stream reuses the oneof wrappers, header values and body buffer of
// the ones before it, so that a gateway's usual messages (headers, body
// chunks, trailers) cost no allocation to receive. It is a proto.Message
// through the embedded ProcessingRequest, so any codec can decode into it;
// the server's codec takes the fast path (decode) and falls back to
// proto.Unmarshal for whatever that does not cover.
//
// What a message held is valid until the next one is received: code that
// keeps a header value or a body chunk past the message copies it.
type inbound struct {
	extprocv3.ProcessingRequest

	reqHeaders   extprocv3.ProcessingRequest_RequestHeaders
	respHeaders  extprocv3.ProcessingRequest_ResponseHeaders
	reqBody      extprocv3.ProcessingRequest_RequestBody
	respBody     extprocv3.ProcessingRequest_ResponseBody
	reqTrailers  extprocv3.ProcessingRequest_RequestTrailers
	respTrailers extprocv3.ProcessingRequest_ResponseTrailers

	headers  extprocv3.HttpHeaders
	trailers extprocv3.HttpTrailers
	body     extprocv3.HttpBody
	// Request headers, response headers and trailers each have their own
	// header values, so that a name is usually found in the slot where the
	// stream before had it.
	maps [3]valueMap
}

// Slots of inbound.maps.
const (
	requestMap = iota
	responseMap
	trailerMap
)

// valueMap is a HeaderMap with every HeaderValue it has held, reused in
// order.
type valueMap struct {
	corev3.HeaderMap
	values []*corev3.HeaderValue
}

// maxPooledChunk bounds the body buffer an inbound keeps for the next
// message, so that one huge chunk does not stay pinned in the pool.
const maxPooledChunk = 256 << 10

// maxPooledValues bounds the header values a header map keeps for the next
// stream: a message of a few MiB can hold a million empty header values,
// which must not stay pinned in the pool after its stream.
const maxPooledValues = 256

// trim forgets the last message when its stream ends: the metadata and
// header values it referred to go, header names and buffers of bounded size
// stay for the next stream.
func (in *inbound) trim() {
	in.Reset()
	for i := range in.maps {
		hm := &in.maps[i]
		if len(hm.values) > maxPooledValues {
			*hm = valueMap{}
			continue
		}
		for _, hv := range hm.values {
			hv.Value = ""
		}
	}
	if cap(in.body.Body) > maxPooledChunk {
		in.body.Body = nil
	}
}

// ProcessingRequest field numbers (envoy/service/ext_proc/v3).
const (
	fieldRequestHeaders   = 2
	fieldResponseHeaders  = 3
	fieldRequestBody      = 4
	fieldResponseBody     = 5
	fieldRequestTrailers  = 6
	fieldResponseTrailers = 7
	fieldMetadataContext  = 8
	fieldObservability    = 10
)

// decode decodes b into in, reusing what in holds. It reports false, with
// in in no particular state, when b holds anything it does not decode
// exactly as proto.Unmarshal would: a field it does not know, a field of an
// unexpected wire type, a repeated singular message, a string that is not
// UTF-8, a malformed encoding. The caller then decodes with proto.Unmarshal,
// which also reports the errors.
func (in *inbound) decode(b []byte) bool {
	m := &in.ProcessingRequest
	m.Reset() // no allocation: it zeroes the message
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == fieldObservability {
			if typ != protowire.VarintType {
				return false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			m.ObservabilityMode, b = v != 0, b[n:]
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if !in.field(num, v) {
			return false
		}
	}
	return true
}

// field decodes one length-delimited field of a ProcessingRequest.
func (in *inbound) field(num protowire.Number, v []byte) bool {
	m := &in.ProcessingRequest
	if num == fieldMetadataContext {
		if m.MetadataContext != nil {
			return false
		}
		m.MetadataContext = new(corev3.Metadata)
		return proto.Unmarshal(v, m.MetadataContext) == nil
	}
	if m.Request != nil { // a second oneof member, or the same one twice
		return false
	}
	switch num {
	case fieldRequestHeaders:
		in.reqHeaders.RequestHeaders, m.Request = &in.headers, &in.reqHeaders
		return in.decodeHeaders(v, &in.maps[requestMap])
	case fieldResponseHeaders:
		in.respHeaders.ResponseHeaders, m.Request = &in.headers, &in.respHeaders
		return in.decodeHeaders(v, &in.maps[responseMap])
	case fieldRequestBody:
		in.reqBody.RequestBody, m.Request = &in.body, &in.reqBody
		return in.decodeBody(v)
	case fieldResponseBody:
		in.respBody.ResponseBody, m.Request = &in.body, &in.respBody
		return in.decodeBody(v)
	case fieldRequestTrailers:
		in.reqTrailers.RequestTrailers, m.Request = &in.trailers, &in.reqTrailers
		return in.decodeTrailers(v)
	case fieldResponseTrailers:
		in.respTrailers.ResponseTrailers, m.Request = &in.trailers, &in.respTrailers
		return in.decodeTrailers(v)
	}
	return false
}

// decodeHeaders decodes an HttpHeaders, headers (1) and end_of_stream (3),
// with the header values of hm.
func (in *inbound) decodeHeaders(b []byte, hm *valueMap) bool {
	h := &in.headers
	h.Headers, h.EndOfStream = nil, false // attributes (2) are never decoded here
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType && h.Headers == nil:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !hm.decode(v) {
				return false
			}
			h.Headers, b = &hm.HeaderMap, b[n:]
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			h.EndOfStream, b = v != 0, b[n:]
		default:
			return false
		}
	}
	return true
}

// decodeTrailers decodes an HttpTrailers: trailers (1).
func (in *inbound) decodeTrailers(b []byte) bool {
	t := &in.trailers
	t.Trailers = nil
	for len(b) > 0 {
		num, v, n := consumeBytesField(b)
		hm := &in.maps[trailerMap]
		if n < 0 || num != 1 || t.Trailers != nil || !hm.decode(v) {
			return false
		}
		t.Trailers, b = &hm.HeaderMap, b[n:]
	}
	return true
}

// decode decodes a HeaderMap: repeated HeaderValue (1).
func (hm *valueMap) decode(b []byte) bool {
	count := 0
	for len(b) > 0 {
		num, v, n := consumeBytesField(b)
		if n < 0 || num != 1 {
			return false
		}
		b = b[n:]
		if count == len(hm.values) {
			hm.values = append(hm.values, new(corev3.HeaderValue))
		}
		if !decodeValue(v, hm.values[count]) {
			return false
		}
		count++
	}
	hm.Headers = nil
	if count > 0 {
		hm.Headers = hm.values[:count:count]
	}
	return true
}

// decodeValue decodes a HeaderValue: key (1), value (2), raw_value (3).
// A key or value equal to the one hv held keeps that string.
func decodeValue(b []byte, hv *corev3.HeaderValue) bool {
	var key, value []byte
	hasRaw := false
	for len(b) > 0 {
		num, v, n := consumeBytesField(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case 1: // a repeated field's last occurrence counts, every one must be UTF-8
			if key != nil && !utf8.Valid(key) {
				return false
			}
			key = v
		case 2:
			if value != nil && !utf8.Valid(value) {
				return false
			}
			value = v
		case 3:
			hv.RawValue, hasRaw = append(hv.RawValue[:0], v...), true
		default:
			return false
		}
	}
	if !hasRaw {
		hv.RawValue = hv.RawValue[:0]
	}
	return reuseString(&hv.Key, key) && reuseString(&hv.Value, value)
}

// consumeBytesField reads one length-delimited field at the start of b: its
// number and its bytes; n is the length of the whole field, negative when b
// does not start with a well-formed length-delimited field.
func consumeBytesField(b []byte) (num protowire.Number, v []byte, n int) {
	num, typ, tn := protowire.ConsumeTag(b)
	if tn < 0 || typ != protowire.BytesType {
		return 0, nil, -1
	}
	v, vn := protowire.ConsumeBytes(b[tn:])
	if vn < 0 {
		return 0, nil, -1
	}
	return num, v, tn + vn
}

// reuseString sets *s to b, keeping the string *s holds when it is equal.
// It reports false when b is not UTF-8, which proto3 requires of a string.
func reuseString(s *string, b []byte) bool {
	if string(b) == *s {
		return true
	}
	if !utf8.Valid(b) {
		return false
	}
	*s = string(b)
	return true
}

// decodeBody decodes an HttpBody: body (1), end_of_stream (2), and the
// flags 3 to 5, into a body buffer reused from message to message.
func (in *inbound) decodeBody(b []byte) bool {
	hb := &in.body
	buf := hb.Body[:0]
	hb.Body, hb.EndOfStream, hb.EndOfStreamWithoutMessage, hb.GrpcMessageCompressed, hb.DrainComplete = nil, false, false, false, false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			buf = append(buf[:0], v...) // the last occurrence wins, as in proto
			hb.Body, b = buf, b[n:]
			continue
		}
		if typ != protowire.VarintType || num < 2 || num > 5 {
			return false
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case 2:
			hb.EndOfStream = v != 0
		case 3:
			hb.EndOfStreamWithoutMessage = v != 0
		case 4:
			hb.GrpcMessageCompressed = v != 0
		case 5:
			hb.DrainComplete = v != 0
		}
	}
	if hb.Body == nil {
		hb.Body = buf // empty, and kept for the next chunk
	}
	return true
}

package vllmgrpc

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrMalformed reports bytes that are not a valid encoding of the message.
var ErrMalformed = errors.New("malformed protobuf message")

// fields calls f for each field of b in order, with the field's value
// bytes: the varint, fixed or length-delimited payload as it follows the
// tag (for BytesType, without its length prefix). Groups are refused.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %w", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			payload, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return fmt.Errorf("%w: field %d: %w", ErrMalformed, num, protowire.ParseError(m))
			}
			v, b = payload, b[m:]
		case protowire.VarintType, protowire.Fixed32Type, protowire.Fixed64Type:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return fmt.Errorf("%w: field %d: %w", ErrMalformed, num, protowire.ParseError(m))
			}
			v, b = b[:m], b[m:]
		default:
			return fmt.Errorf("%w: field %d has wire type %d", ErrMalformed, num, typ)
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

func wrongType(num protowire.Number, typ protowire.Type) error {
	return fmt.Errorf("%w: field %d: unexpected wire type %d", ErrMalformed, num, typ)
}

// varint reads a varint field's value.
func varint(num protowire.Number, typ protowire.Type, v []byte) (uint64, error) {
	if typ != protowire.VarintType {
		return 0, wrongType(num, typ)
	}
	x, _ := protowire.ConsumeVarint(v)
	return x, nil
}

// uint32Field reads a uint32 field; a larger varint is truncated, as
// protobuf's decoders do.
func uint32Field(num protowire.Number, typ protowire.Type, v []byte) (uint32, error) {
	x, err := varint(num, typ, v)
	return uint32(x), err //nolint:gosec // protobuf truncates an oversized uint32 varint
}

func boolField(num protowire.Number, typ protowire.Type, v []byte) (bool, error) {
	x, err := varint(num, typ, v)
	return x != 0, err
}

func bytesField(num protowire.Number, typ protowire.Type, v []byte) ([]byte, error) {
	if typ != protowire.BytesType {
		return nil, wrongType(num, typ)
	}
	return v, nil
}

func stringField(num protowire.Number, typ protowire.Type, v []byte) (string, error) {
	b, err := bytesField(num, typ, v)
	return string(b), err
}

func doubleField(num protowire.Number, typ protowire.Type, v []byte) (float64, error) {
	if typ != protowire.Fixed64Type {
		return 0, wrongType(num, typ)
	}
	x, _ := protowire.ConsumeFixed64(v)
	return math.Float64frombits(x), nil
}

// appendUint32s reads a repeated uint32 field's occurrence, packed or not.
func appendUint32s(dst []uint32, num protowire.Number, typ protowire.Type, v []byte) ([]uint32, error) {
	switch typ {
	case protowire.VarintType:
		x, _ := protowire.ConsumeVarint(v)
		return append(dst, uint32(x)), nil //nolint:gosec // protobuf truncates an oversized uint32 varint
	case protowire.BytesType:
		for len(v) > 0 {
			x, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return dst, fmt.Errorf("%w: field %d: %w", ErrMalformed, num, protowire.ParseError(n))
			}
			dst, v = append(dst, uint32(x)), v[n:] //nolint:gosec // as above
		}
		return dst, nil
	}
	return dst, wrongType(num, typ)
}

// appendFloats reads a repeated float field's occurrence, packed or not.
func appendFloats(dst []float32, num protowire.Number, typ protowire.Type, v []byte) ([]float32, error) {
	switch typ {
	case protowire.Fixed32Type:
		x, _ := protowire.ConsumeFixed32(v)
		return append(dst, math.Float32frombits(x)), nil
	case protowire.BytesType:
		if len(v)%4 != 0 {
			return dst, fmt.Errorf("%w: field %d: packed floats of %d bytes", ErrMalformed, num, len(v))
		}
		for ; len(v) > 0; v = v[4:] {
			x, _ := protowire.ConsumeFixed32(v)
			dst = append(dst, math.Float32frombits(x))
		}
		return dst, nil
	}
	return dst, wrongType(num, typ)
}

// Encoding helpers: proto3 leaves zero scalars out.

func putString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func putUint(b []byte, num protowire.Number, x uint64) []byte {
	if x == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, x)
}

func putBool(b []byte, num protowire.Number, x bool) []byte {
	if !x {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

func putDouble(b []byte, num protowire.Number, x float64) []byte {
	if x == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(x))
}

func putMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func putPackedUint32s(b []byte, num protowire.Number, xs []uint32) []byte {
	if len(xs) == 0 {
		return b
	}
	var p []byte
	for _, x := range xs {
		p = protowire.AppendVarint(p, uint64(x))
	}
	return putMessage(b, num, p)
}

func putPackedFloats(b []byte, num protowire.Number, xs []float32) []byte {
	if len(xs) == 0 {
		return b
	}
	p := make([]byte, 0, 4*len(xs))
	for _, x := range xs {
		p = protowire.AppendFixed32(p, math.Float32bits(x))
	}
	return putMessage(b, num, p)
}

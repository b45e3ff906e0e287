package openai

import (
	"errors"
	"fmt"
)

// Errors returned by Parse, always wrapped with detail. Each one means the
// client sent a request that no model server would accept (HTTP 400).
var (
	// ErrSyntax: the body is not valid JSON (including invalid UTF-8 in a string).
	ErrSyntax = errors.New("invalid JSON")
	// ErrNotObject: the body is valid JSON but not an object.
	ErrNotObject = errors.New("body is not a JSON object")
	// ErrTooDeep: objects and arrays nest deeper than MaxDepth.
	ErrTooDeep = errors.New("JSON nested too deeply")
	// ErrMissingModel: the body has no "model", or it is null or empty.
	ErrMissingModel = errors.New("missing model")
	// ErrFieldType: a field the picker reads has the wrong JSON type.
	ErrFieldType = errors.New("field has the wrong type")

	// Errors returned by ParseGRPC. Each one means the model server would
	// not read the request either.

	// ErrGRPCFrame: the body is not one gRPC message: shorter than its
	// prefix, shorter or longer than the length the prefix gives, or with a
	// flag byte other than 0 or 1.
	ErrGRPCFrame = errors.New("invalid gRPC message framing")
	// ErrGRPCCompressed: the message is compressed (flag byte 1), which
	// the picker does not read.
	ErrGRPCCompressed = errors.New("compressed gRPC message")
	// ErrProto: the message is not valid protobuf wire format, or one of
	// its strings is not UTF-8.
	ErrProto = errors.New("invalid protobuf message")
	// ErrMissingInput: a GenerateRequest with neither text nor tokenized
	// input, or an EmbedRequest without tokenized input.
	ErrMissingInput = errors.New("missing input")
)

// MaxDepth is how deeply objects and arrays may nest in a request body.
const MaxDepth = 128

func syntaxError(l *lexer, what string) error {
	if l.i >= len(l.b) {
		return fmt.Errorf("%w: %s at end of body", ErrSyntax, what)
	}
	return fmt.Errorf("%w: %s: unexpected %q at offset %d", ErrSyntax, what, l.b[l.i], l.i)
}

func fieldTypeError(field string, l *lexer, want string) error {
	return fmt.Errorf("%w: %s must be %s, got %s", ErrFieldType, field, want, l.kindName())
}

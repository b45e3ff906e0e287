package extproc

import (
	"bytes"
	"strings"
	"unicode/utf8"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/inferpick/inferpick/picker/openai"
)

// An upload is a multipart/form-data request body, as the audio endpoints
// (/v1/audio/transcriptions, /v1/audio/translations) take: a file and form
// fields, "model" among them. The model field says which pods serve it, as
// a JSON body's does, and a rewrite splices the new name into its value.
// An audio file may be larger than the body the picker holds: an upload
// whose model field comes before its file (the openai Python client writes
// its fields first) is routed on the front of its body, and the rest
// passes through as it comes, never held.

// maxUploadFront is how much of an upload's front is read for its model
// field before the picker waits for the whole body instead: a model that
// comes after the file is read once the body has ended.
const maxUploadFront = initialBodyBytes

// formBoundary is the boundary of a multipart/form-data content type, ""
// for any other. Another content type is judged on its bytes, without
// making a string of them, so reading it allocates nothing whatever its
// length.
func formBoundary(h *corev3.HeaderValue) string {
	const media = "multipart/form-data"
	raw := h.GetRawValue()
	if len(raw) == 0 {
		raw = unsafe.Slice(unsafe.StringData(h.GetValue()), len(h.GetValue()))
	}
	if v := bytes.TrimLeft(raw, " \t"); len(v) < len(media) || !bytes.EqualFold(v[:len(media)], []byte(media)) {
		return ""
	}
	b, _ := openai.FormBoundary(headerValue(h))
	return b
}

// upload reports whether the request is an upload whose model is read
// here (not a tunnel, not a body of an OpenAI JSON path).
func (x *exchange) upload() bool {
	return x.boundary != "" && x.kind == openai.Unknown && !x.tunnel
}

// routeFront reports whether the upload can be routed on the front of its
// body held so far: its first model field is there, whole. The front is
// read again each time it has doubled, up to maxUploadFront, so a body
// that comes in small chunks is not read over and over.
func (x *exchange) routeFront() bool {
	if !x.upload() || x.frontRead >= maxUploadFront || len(x.body) < 2*x.frontRead {
		return false
	}
	x.frontRead = len(x.body)
	x.uploading = x.formModel(openai.FormModelPrefix)
	return x.uploading
}

// requestSize is the request body's size, as counted in the request
// metrics: an upload routed on its front counts its declared length.
func (x *exchange) requestSize() int {
	if x.uploading && x.declared > 0 {
		return x.declared
	}
	return len(x.body)
}

// formModel reads the "model" field of an upload, with read (FormModel,
// or FormModelPrefix for the front of the body), into x.parsed, its
// value's place in the body included, so that a rewrite splices the new
// name in as it does in a JSON body. It reports false for an upload that
// names no model (or an empty one), which is routed by load once its body
// has ended.
func (x *exchange) formModel(read func([]byte, string) (int, int, bool)) bool {
	start, end, ok := read(x.body, x.boundary)
	if !ok || start == end {
		return false
	}
	x.parsed.Reset()
	x.parsed.Model = string(x.body[start:end])
	if !utf8.ValidString(x.parsed.Model) { // a metric label, a log value
		x.parsed.Model = strings.ToValidUTF8(x.parsed.Model, "\uFFFD")
	}
	x.parsed.ModelStart, x.parsed.ModelEnd = start, end
	x.rw.form = true
	return true
}

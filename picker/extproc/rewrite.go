package extproc

import (
	"bytes"

	"github.com/inferpick/inferpick/picker/epmetrics"
	"github.com/inferpick/inferpick/picker/rewrite"
)

// ModelRewriteHeader is the request header that names the model to send
// the request to instead of the one its body asks for, as in the upstream
// endpoint-picker protocol. A model rewrite rule that matches the request
// takes precedence. The header is removed before the request goes upstream.
const ModelRewriteHeader = "x-gateway-model-name-rewrite"

// Rewriter says which model a request for model is sent to (a
// *rewrite.Table, fed by the InferenceModelRewrite controller).
type Rewriter interface {
	Rewrite(model, requestID string) (rewrite.Decision, bool)
}

var _ Rewriter = (*rewrite.Table)(nil)

// modelRewrite is the rewrite of one request's "model" field. The body is
// not changed in place (its bytes back the parsed prompt): the value is
// replaced as the body is sent back, between the bytes before and after it.
type modelRewrite struct {
	header string // the request's ModelRewriteHeader
	source string // the rewrite whose rule applied, "" for none
	// named: the rule lists the requested model by name, so that the name
	// is the operator's, not any a client made up.
	named      bool
	value      []byte // the new value's content, escaped; nil: body unchanged
	start, end int    // the old value's content in the body
	// form: the value is an upload's form field, which holds the name as
	// it is, not a JSON string.
	form bool

	// from and to are the "model" member with the target's name and with
	// the requested one (raw, escapes as the client wrote them).
	from, to []byte
}

// rewriteModel decides the request's target model once the body is parsed,
// and makes it the model the policy picks for.
func (x *exchange) rewriteModel() {
	model := x.parsed.Model
	target, value, source, named := x.targetOf(model)
	if target == "" {
		return
	}
	// A rule's decision counts even when it keeps the model (a canary
	// with the requested model as one target), as upstream counts it.
	x.rw.source, x.rw.named = source, named
	if target == model {
		return
	}
	x.rw.value, x.rw.start, x.rw.end = value, x.parsed.ModelStart, x.parsed.ModelEnd
	x.rw.from = modelMember(value)
	x.rw.to = modelMember(x.body[x.rw.start:x.rw.end])
	if x.rw.form {
		x.rw.value, x.rw.to = []byte(target), modelMember(rewrite.Escape(model))
	}
	x.pick.Model = target
}

// targetOf is the model a request for model is sent to: a matching rule's
// (with its value escaped for JSON, its source, and whether it names model),
// else the ModelRewriteHeader's, else "": model itself.
func (x *exchange) targetOf(model string) (target string, value []byte, source string, named bool) {
	if rw := x.s.opts.Rewrites; rw != nil {
		if d, ok := rw.Rewrite(model, x.id()); ok {
			return d.Model, d.JSON, d.Source, d.Named
		}
	}
	if x.rw.header != "" {
		return x.rw.header, rewrite.Escape(x.rw.header), "", false
	}
	return "", nil, "", false
}

// modelSeries sets the series of the request for model, once its target
// model is decided, and counts its rewrite under the same model_name.
func (x *exchange) modelSeries(model string) {
	from := epmetrics.NoRule
	switch {
	case x.rw.named:
		from = epmetrics.NamedRule
	case x.rw.source != "":
		from = epmetrics.AnyModelRule
	}
	x.series = x.s.upstream.ModelTarget(model, x.pick.Model, from)
	if x.rw.source != "" {
		model, _ := x.series.Labels()
		x.s.rewrites.Record(x.rw.source, model, x.pick.Model)
	}
}

// bodyLen is the length of the body as it goes upstream; -1 when it is
// not known (an upload routed on its front without a content-length).
func (x *exchange) bodyLen() int {
	n := len(x.body)
	if x.uploading {
		if x.declared == 0 {
			return -1
		}
		n = x.declared
	}
	if x.rw.value == nil {
		return n
	}
	return n - (x.rw.end - x.rw.start) + len(x.rw.value)
}

// bodyEnds reports whether the body sent back at routing is the whole
// body: neither trailers nor the rest of an upload follow it.
func (x *exchange) bodyEnds() bool { return !x.trailers && !x.uploading }

// maxSpliceCopy is the most bytes of the body copied to join them with the
// new model value in one chunk: the bytes before the value when there are
// that few (the usual case: "model" comes first), else the bytes after it.
// A longer body on both sides goes back in separate chunks, uncopied.
const maxSpliceCopy = 4 << 10

// sendBody returns the request body to the gateway with its model
// rewritten, if it is: the bytes before the old value, the new value, then
// the bytes after it. At most maxSpliceCopy bytes of the body are copied.
func (x *exchange) sendBody() error {
	if x.rw.value == nil {
		return x.out.bodyChunks(x.body, x.bodyEnds(), x.send)
	}
	head, value, tail := x.body[:x.rw.start], x.rw.value, x.body[x.rw.end:]
	switch {
	case len(head) <= maxSpliceCopy:
		return x.sendParts(join(head, value), tail)
	case len(tail) <= maxSpliceCopy:
		return x.sendParts(head, join(value, tail))
	default:
		return x.sendParts(head, value, tail)
	}
}

func join(a, b []byte) []byte {
	return append(append(make([]byte, 0, len(a)+len(b)), a...), b...)
}

// sendParts sends the parts as one body in chunks of at most maxChunk
// bytes, the last one marked end of stream unless trailers or the rest of
// an upload follow. The last part is never empty.
func (x *exchange) sendParts(parts ...[]byte) error {
	last := len(parts) - 1
	for _, p := range parts[:last] {
		for len(p) > 0 {
			n := min(len(p), maxChunk)
			if err := x.send(x.out.streamedBody(p[:n], false, true)); err != nil {
				return err
			}
			p = p[n:]
		}
	}
	return x.out.bodyChunks(parts[last], x.bodyEnds(), x.send)
}

// restoreModel gives the client back the model name it asked for: in a
// response chunk of a rewritten request, the member "model":"<target>" (as
// vLLM writes it) becomes "model":"<requested>". A member split between two
// chunks is left as it is. Only a chunk that holds the member is copied.
func (x *exchange) restoreModel(chunk []byte) []byte {
	if x.rw.value == nil {
		return chunk
	}
	if !bytes.Contains(chunk, x.rw.from) {
		return chunk
	}
	return bytes.ReplaceAll(chunk, x.rw.from, x.rw.to)
}

// modelMember is the JSON member "model":"<value>", value already escaped.
func modelMember(value []byte) []byte {
	const key = `"model":"`
	return append(append(append(make([]byte, 0, len(key)+len(value)+1), key...), value...), '"')
}

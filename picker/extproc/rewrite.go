package extproc

import (
	"encoding/json"

	"github.com/inferpick/inferpick/picker/rewrite"
)

// ModelRewriteHeader, on a request, names the model to send it to instead
// of the one its body asks for, as in the upstream endpoint-picker protocol.
// A model rewrite rule that matches the request takes precedence. The
// header is removed before the request goes upstream.
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
	header     string // the request's ModelRewriteHeader
	value      []byte // the new value's content, escaped; nil: body unchanged
	start, end int    // the old value's content in the body
}

// rewriteModel decides the request's target model once the body is parsed,
// and makes it the model the policy picks for.
func (x *exchange) rewriteModel() {
	model := x.parsed.Model
	target, value, source := "", []byte(nil), ""
	if rw := x.s.opts.Rewrites; rw != nil {
		if d, ok := rw.Rewrite(model, x.requestID); ok {
			target, value, source = d.Model, d.JSON, d.Source
		}
	}
	if target == "" && x.rw.header != "" {
		target = x.rw.header
		b, _ := json.Marshal(target) // a string always marshals
		value = b[1 : len(b)-1]
	}
	if target == "" || target == model {
		return
	}
	if source != "" {
		x.s.rewrites.Record(source, model, target)
	}
	x.rw.value, x.rw.start, x.rw.end = value, x.parsed.ModelStart, x.parsed.ModelEnd
	x.pick.Model = target
}

// bodyLen is the length of the body as it goes upstream.
func (x *exchange) bodyLen() int {
	if x.rw.value == nil {
		return len(x.body)
	}
	return len(x.body) - (x.rw.end - x.rw.start) + len(x.rw.value)
}

// sendBody returns the request body to the gateway with its model
// rewritten, if it is: the bytes before the old value, the new value, then
// the rest. Nothing of the body is copied.
func (x *exchange) sendBody() error {
	if x.rw.value == nil {
		return bodyChunks(x.body, true, x.send)
	}
	for head := x.body[:x.rw.start]; len(head) > 0; {
		n := min(len(head), maxChunk)
		if err := x.send(streamedBody(head[:n], false, true)); err != nil {
			return err
		}
		head = head[n:]
	}
	if len(x.rw.value) > 0 {
		if err := x.send(streamedBody(x.rw.value, false, true)); err != nil {
			return err
		}
	}
	return bodyChunks(x.body[x.rw.end:], true, x.send)
}

package extproc

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/inferpick/inferpick/picker/registry"
	sessiontoken "github.com/inferpick/inferpick/picker/session"
)

// readSession decodes the request's session token into the exchange, in
// place. A token that names no pod is noted and otherwise ignored: the
// request is picked as usual and its response carries a new token. With
// session ids the header's value is hashed in place instead; an empty one
// is no id.
func (x *exchange) readSession(hv *corev3.HeaderValue) {
	v := hv.GetRawValue()
	if len(v) == 0 && hv.GetValue() != "" {
		v = []byte(hv.GetValue()) // an old gateway's: a copy, on that path only
	}
	if x.s.opts.SessionIDs {
		x.sessionID.Read(v)
		return
	}
	x.sessionErr = x.session.Decode(v)
}

// logSession says, at debug verbosity, why a request's session token did
// not keep it on its pod.
func (x *exchange) logSession() {
	if x.s.opts.SessionHeader == "" || x.s.opts.SessionIDs {
		return
	}
	log := x.s.opts.Log.V(2)
	if !log.Enabled() {
		return
	}
	switch {
	case x.sessionErr != nil:
		log.Info("Session token not read; picked as usual", "requestID", x.id(), "err", x.sessionErr.Error())
	case x.session.Valid() && !x.session.Is(x.picked[0].Pod()):
		log.Info("Session pod not picked; picked as usual", "requestID", x.id(), "pod", string(x.session.Bytes()), "reason", x.sessionMiss())
	}
}

// sessionMiss says why the pick left the session's pod.
func (x *exchange) sessionMiss() string {
	for _, w := range x.s.reg.Workers() {
		if !x.session.Is(w.Pod()) {
			continue
		}
		if x.subset.present && !x.subset.allows(w.Endpoint().Address) {
			return "the pod is outside the gateway's subset"
		}
		if !w.Role().Decodes() {
			return "the pod does not decode (llm-d.ai/role)"
		}
		return "the pod is saturated for the request or does not serve its model"
	}
	return "the pod is not a ready endpoint of the pool (gone, unready or never in it)"
}

// sessionReply is the reply to the response headers: one that sets the
// session header to served's token when the request's named another pod,
// or none.
func (x *exchange) sessionReply(served *registry.Worker) *extprocv3.ProcessingResponse {
	ns, name := served.Pod()
	if x.session.Valid() && x.session.Is(ns, name) {
		return continueResponseHeaders
	}
	return x.out.sessionHeaders(x.s.opts.SessionHeader, ns, name)
}

// sessionHeaders is the reply to the response headers that sets header to
// the token of the pod ns/name. It is built once per pooled exchange.
func (r *replies) sessionHeaders(header, ns, name string) *extprocv3.ProcessingResponse {
	if r.session == nil {
		r.sessionValue = &corev3.HeaderValue{}
		r.session = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
					Header: r.sessionValue, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
				}}},
			}},
		}}
	}
	r.sessionValue.Key = header
	r.sessionValue.RawValue = sessiontoken.AppendToken(r.sessionValue.RawValue[:0], ns, name)
	return r.session
}

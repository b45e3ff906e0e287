package extproc

import (
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferpick/inferpick/picker/attrexpr"
)

// usageMeta is the dynamic metadata of the attributes a response reports
// (Options.Attributes), built once per pooled exchange and refilled at the
// end of each response, so that reporting allocates nothing once warm.
type usageMeta struct {
	top *structpb.Struct
	// Per attribute: its namespace's value in top, its own value in that
	// namespace, and the number that value holds.
	ns     []*structpb.Value
	vals   []*structpb.Value
	number []*structpb.Value_NumberValue
}

func newUsageMeta(attrs []attrexpr.Attribute) *usageMeta {
	m := &usageMeta{top: &structpb.Struct{Fields: make(map[string]*structpb.Value, len(attrs))}}
	byNS := make(map[string]*structpb.Value)
	for _, a := range attrs {
		ns, ok := byNS[a.Namespace]
		if !ok {
			ns = structpb.NewStructValue(&structpb.Struct{Fields: make(map[string]*structpb.Value)})
			byNS[a.Namespace] = ns
		}
		n := &structpb.Value_NumberValue{}
		m.ns = append(m.ns, ns)
		m.vals = append(m.vals, &structpb.Value{Kind: n})
		m.number = append(m.number, n)
	}
	return m
}

// reportUsage evaluates the attributes over the response's usage and
// returns the metadata of those reported, nil when none is (or none is
// configured). An attribute whose evaluation fails (a division by zero, an
// int mixed with a double) is left out with a log line, as upstream does,
// at verbosity 1 after its first.
func (x *exchange) reportUsage() *structpb.Struct {
	attrs := x.s.opts.Attributes
	if len(attrs) == 0 || x.bodyNotSent || x.tunnel {
		return nil
	}
	if x.out.usage == nil {
		x.out.usage = newUsageMeta(attrs)
	}
	m := x.out.usage
	clear(m.top.Fields)
	for _, ns := range m.ns {
		clear(ns.GetStructValue().Fields)
	}
	su := x.scanner.Usage()
	u := attrexpr.Usage{
		attrexpr.PromptTokens:     int64(su.PromptTokens),
		attrexpr.CompletionTokens: int64(su.CompletionTokens),
		attrexpr.TotalTokens:      int64(su.TotalTokens),
	}
	for i := range attrs {
		a := &attrs[i]
		v, ok, err := a.Report(&u)
		if err != nil {
			x.attributeFailed(i, err)
		}
		if !ok {
			continue
		}
		m.number[i].NumberValue = float64(v)
		m.ns[i].GetStructValue().Fields[a.Name] = m.vals[i]
		m.top.Fields[a.Namespace] = m.ns[i]
	}
	if len(m.top.Fields) == 0 {
		return nil
	}
	return m.top
}

// attributeFailed logs that attribute i was not reported, for err: at
// the default verbosity the first time, at V(1) after, when the failure's
// text is built only if that verbosity logs.
func (x *exchange) attributeFailed(i int, err error) {
	a := &x.s.opts.Attributes[i]
	log := x.s.opts.Log
	if x.s.attrFailed[i].Swap(true) {
		// A value that fails on most responses would flood the log:
		// only its first failure is at the default verbosity.
		if log = log.V(1); !log.Enabled() {
			return
		}
	}
	cond := ""
	if a.Condition != nil {
		cond = a.Condition.String()
	}
	log.Info("Attribute not reported", "namespace", a.Namespace, "name", a.Name,
		"expression", a.Expression.String(), "condition", cond, "err", err.Error(), "requestID", x.id())
}

// endTrailers is the reply to the response trailers, carrying md when it is
// not nil.
func (r *replies) endTrailers(md *structpb.Struct) *extprocv3.ProcessingResponse {
	if md == nil {
		return continueResponseTrailers
	}
	if r.trailers == nil {
		r.trailers = &extprocv3.ProcessingResponse{Response: continueResponseTrailers.Response}
	}
	r.trailers.DynamicMetadata = md
	return r.trailers
}

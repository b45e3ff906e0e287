package extproc

import (
	"context"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span names.
const (
	spanRequest = "inferpick.request"
	spanPick    = "inferpick.pick"
)

// propagator reads and writes W3C trace context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// headerCarrier reads trace context from the request's header list.
type headerCarrier []*corev3.HeaderValue

func (c headerCarrier) Get(key string) string {
	for _, h := range c {
		if h.GetKey() == key {
			return headerValue(h)
		}
	}
	return ""
}
func (c headerCarrier) Set(string, string) {}
func (c headerCarrier) Keys() []string {
	keys := make([]string, len(c))
	for i, h := range c {
		keys[i] = h.GetKey()
	}
	return keys
}

// mapCarrier collects the trace context to add to the routed request.
type mapCarrier [][2]string

func (c *mapCarrier) Get(string) string     { return "" }
func (c *mapCarrier) Set(key, value string) { *c = append(*c, [2]string{key, value}) }
func (c *mapCarrier) Keys() []string        { return nil }

// startSpan starts the request's span, a child of the trace context the
// request carries. It does nothing when tracing is off.
func (x *exchange) startSpan(headers []*corev3.HeaderValue) {
	t := x.s.opts.Tracer
	if t == nil {
		return
	}
	ctx := propagator.Extract(context.Background(), headerCarrier(headers))
	x.spanCtx, x.span = t.Start(ctx, spanRequest, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.path", pathOnly(x.path)), attribute.String("request.id", x.id())))
}

// traceHeaders returns the trace context to add to the routed request so
// that the model server continues the request's trace.
func (x *exchange) traceHeaders() [][2]string {
	if x.span == nil {
		return nil
	}
	var c mapCarrier
	propagator.Inject(x.spanCtx, &c)
	return c
}

// endSpan ends the request's span with the reason the request ended.
func (x *exchange) endSpan(reason string) {
	if x.span == nil {
		return
	}
	x.span.SetAttributes(attribute.String("inferpick.release_reason", reason))
	if reason != reasonCompleted {
		x.span.SetStatus(codes.Error, reason)
	}
	x.span.End()
	x.span, x.spanCtx = nil, nil
}

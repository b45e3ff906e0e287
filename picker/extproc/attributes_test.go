package extproc

import (
	"fmt"
	"strings"
	"testing"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/attrexpr"
)

// The responses of upstream's integration tests of the
// request-attribute-reporter (test/integration/epp at v1.5.0).
const (
	usageJSON = `{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"Hello! How can I help you today?","role":"assistant"}}],` +
		`"created":1773675992,"id":"chatcmpl-63a9a231","model":"m","object":"chat.completion","usage":{"completion_tokens":10,"prompt_tokens":32,"total_tokens":42}}`
	firstEvent = `data: {"choices":[{"delta":{"content":"Hello! "},"index":0,"finish_reason":null}],"id":"123","created":1,"model":"m","object":"chat.completion.chunk"}` + "\n\n"
	usageEvent = `data: {"choices":[{"delta":{},"index":0,"finish_reason":"stop"}],"id":"123","created":1,"model":"m","object":"chat.completion.chunk",` +
		`"usage":{"completion_tokens":10,"prompt_tokens":32,"total_tokens":42}}` + "\n\n"
)

// upstreamCost is the attribute of upstream's sample configuration
// (test/integration/epp/testdata/request-attribute-reporter-config.yaml).
var upstreamCost = [4]string{"envoy.lb", "x-gateway-inference-request-cost", "usage.completion_tokens\n", "has(usage.completion_tokens)"}

func cost(v float64) map[string]any {
	return map[string]any{"envoy.lb": map[string]any{"x-gateway-inference-request-cost": v}}
}

// TestResponseReportsAttributes follows a response through the stream and
// reads the dynamic metadata of each reply on the response path, the
// response headers' first: what Envoy would set from them.
func TestResponseReportsAttributes(t *testing.T) {
	for name, tc := range map[string]struct {
		attrs       [][4]string // namespace, name, expression, condition
		status      int
		contentType string
		chunks      []string
		// end is how the response ends: "eos" (the last chunk ends the
		// stream), "trailers", "cancel" (the client goes away) or
		// "no body" (response_body_mode NONE; the trailers come).
		end     string
		want    []map[string]any // per reply
		wantLog string
	}{
		"streaming, usage in the last event": {
			attrs: [][4]string{upstreamCost}, status: 200, contentType: "text/event-stream",
			chunks: []string{firstEvent, usageEvent, sseDone}, end: "eos",
			want: []map[string]any{nil, nil, nil, cost(10)},
		},
		"streaming, usage and [DONE] in the chunk that ends": {
			attrs: [][4]string{upstreamCost}, status: 200, contentType: "text/event-stream",
			chunks: []string{firstEvent, usageEvent + sseDone}, end: "eos",
			want: []map[string]any{nil, nil, cost(10)},
		},
		"streaming, an empty chunk ends it after [DONE]": {
			attrs: [][4]string{upstreamCost}, status: 200, contentType: "text/event-stream",
			chunks: []string{firstEvent, usageEvent + sseDone, ""}, end: "eos",
			want: []map[string]any{nil, nil, nil, cost(10)},
		},
		"non-streaming, in two chunks": {
			attrs: [][4]string{upstreamCost}, status: 200, contentType: "application/json",
			chunks: []string{usageJSON[:40], usageJSON[40:]}, end: "eos",
			want: []map[string]any{nil, nil, cost(10)},
		},
		"trailers end the response": {
			attrs: [][4]string{upstreamCost}, status: 200, contentType: "text/event-stream",
			chunks: []string{firstEvent, usageEvent, sseDone}, end: "trailers",
			want: []map[string]any{nil, nil, nil, nil, cost(10)},
		},
		"two attributes, two namespaces": {
			attrs: [][4]string{
				upstreamCost,
				{"", "prompt", "usage.prompt_tokens", ""},
				{"billing", "weighted", "usage.prompt_tokens + 4.0 * usage.completion_tokens", "usage.total_tokens > 0"},
			},
			status: 200, contentType: "application/json", chunks: []string{usageJSON}, end: "eos",
			want: []map[string]any{nil, {
				"envoy.lb": map[string]any{"x-gateway-inference-request-cost": 10.0, "prompt": 32.0},
				"billing":  map[string]any{"weighted": 72.0},
			}},
		},
		"condition false": {
			attrs:  [][4]string{{"envoy.lb", "cost", "usage.completion_tokens", "usage.completion_tokens > 100"}},
			status: 200, contentType: "text/event-stream", chunks: []string{firstEvent, usageEvent + sseDone}, end: "eos",
			want: []map[string]any{nil, nil, nil},
		},
		"no usage in the response": {
			attrs: [][4]string{upstreamCost}, status: 200, contentType: "text/event-stream",
			chunks: []string{firstEvent, sseDone}, end: "eos",
			want: []map[string]any{nil, nil, nil},
		},
		"a count the usage lacks is 0, and 0 is not reported": {
			attrs:  [][4]string{upstreamCost, {"", "total", "usage.prompt_tokens + usage.completion_tokens", ""}},
			status: 200, contentType: "application/json",
			chunks: []string{`{"object":"chat.completion","usage":{"prompt_tokens":7}}`}, end: "eos",
			want: []map[string]any{nil, {"envoy.lb": map[string]any{"total": 7.0}}},
		},
		"division by zero leaves its attribute out": {
			attrs: [][4]string{
				{"", "ratio", "usage.prompt_tokens > 0.0 ? 64 / 0 : 1", ""},
				upstreamCost,
			},
			status: 200, contentType: "application/json", chunks: []string{usageJSON}, end: "eos",
			want:    []map[string]any{nil, cost(10)},
			wantLog: `"msg"="Attribute not reported" "namespace"="envoy.lb" "name"="ratio" "expression"="usage.prompt_tokens > 0.0 ? 64 / 0 : 1" "condition"="" "err"="division by zero"`,
		},
		"an error status without a usage": {
			attrs: [][4]string{upstreamCost}, status: 500, contentType: "application/json",
			chunks: []string{`{"object":"error","message":"engine dead","code":500}`}, end: "eos",
			want: []map[string]any{nil, nil},
		},
		// Upstream reads the body of any status and runs its reporter on
		// it, so an error that tells its usage reports it.
		"an error status with a usage": {
			attrs: [][4]string{upstreamCost}, status: 500, contentType: "application/json",
			chunks: []string{`{"object":"error","message":"cut short","code":500,"usage":{"prompt_tokens":32,"completion_tokens":10,"total_tokens":42}}`}, end: "eos",
			want: []map[string]any{nil, cost(10)},
		},
		"the client goes away": {
			attrs: [][4]string{upstreamCost}, status: 200, contentType: "text/event-stream",
			chunks: []string{firstEvent, usageEvent}, end: "cancel",
			want: []map[string]any{nil, nil, nil},
		},
		"the gateway sends no response body": {
			attrs: [][4]string{upstreamCost}, status: 200, contentType: "application/json", end: "no body",
			want: []map[string]any{nil, nil},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var logs *logRecorder
			e := newEnv(t, twoWorkers, func(o *Options) {
				for _, a := range tc.attrs {
					attr, err := attrexpr.NewAttribute(a[0], a[1], a[2], a[3])
					if err != nil {
						t.Fatal(err)
					}
					o.Attributes = append(o.Attributes, attr)
				}
				logs = recordLogs(o)
			})
			s := e.open()
			body := chatBody("m", "hello")
			if tc.end == "no body" {
				s.requestHeadersInModes(extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_NONE)
			} else {
				s.requestHeaders("/v1/chat/completions", len(body), false, nil)
			}
			s.requestBody(body, true)
			s.routed(true)

			var got []map[string]any
			read := func() {
				r := s.recv()
				got = append(got, r.GetDynamicMetadata().AsMap())
				if len(got[len(got)-1]) == 0 {
					got[len(got)-1] = nil
				}
			}
			s.responseHeaders(tc.status, tc.contentType, false, "")
			read()
			for i, c := range tc.chunks {
				s.responseBody(c, tc.end == "eos" && i == len(tc.chunks)-1)
				read()
			}
			switch tc.end {
			case "trailers", "no body":
				s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}})
				read()
			case "cancel":
				s.cancel()
				if _, err := s.stream.Recv(); err == nil {
					t.Fatal("the stream went on after the client went away")
				}
				eventually(t, "the guard's release", func() bool { return e.releases(reasonCancelled) == 1 })
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("dynamic metadata per reply (-want +got):\n%s", diff)
			}
			logged := logs.String()
			if tc.wantLog != "" && !strings.Contains(logged, tc.wantLog) {
				t.Errorf("log:\n%s\nwant a line with %s", logged, tc.wantLog)
			}
			if tc.wantLog == "" && strings.Contains(logged, "Attribute not reported") {
				t.Errorf("log:\n%s\nwant no attribute left out", logged)
			}
		})
	}
}

// TestPooledExchangeReportsOnlyItsOwnResponse sends responses one after
// another through one server, the exchange of each going back to the pool
// before the next: those whose condition holds report, the others carry no
// metadata, whatever the exchange reported before. An attribute that fails
// on every response is logged once at the default verbosity.
func TestPooledExchangeReportsOnlyItsOwnResponse(t *testing.T) {
	var logs *logRecorder
	e := newEnv(t, twoWorkers, func(o *Options) {
		for _, a := range [][4]string{
			{"", "cost", "usage.completion_tokens", "usage.completion_tokens > 5"},
			{"", "broken", "(true ? usage.prompt_tokens : 1) * 2", ""},
		} {
			attr, err := attrexpr.NewAttribute(a[0], a[1], a[2], a[3])
			if err != nil {
				t.Fatal(err)
			}
			o.Attributes = append(o.Attributes, attr)
		}
		logs = recordLogs(o)
	})
	for i := range 8 {
		completion, want := 10, map[string]any{"envoy.lb": map[string]any{"cost": 10.0}}
		if i%2 == 1 {
			completion, want = 1, nil
		}
		s := e.open()
		body := chatBody("m", "hello")
		s.requestHeaders("/v1/chat/completions", len(body), false, nil)
		s.requestBody(body, true)
		s.routed(true)
		s.responseHeaders(200, "application/json", false, "")
		s.recv()
		s.responseBody(fmt.Sprintf(`{"object":"chat.completion","usage":{"prompt_tokens":3,"completion_tokens":%d}}`, completion), true)
		got := s.recv().GetDynamicMetadata().AsMap()
		if len(got) == 0 {
			got = nil
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("response %d (%d completion tokens): dynamic metadata (-want +got):\n%s", i, completion, diff)
		}
		if err := s.stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.stream.Recv(); err == nil {
			t.Fatal("the stream went on after the gateway closed it")
		}
	}
	if n := strings.Count(logs.String(), "Attribute not reported"); n != 1 {
		t.Errorf("%d lines of an attribute not reported at the default verbosity, want 1:\n%s", n, logs.String())
	}
}

package extproc

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/rewrite"
)

// A dashboard written for the upstream picker sees a streamed request with
// usage, a rejected one and a model-server failure.
func TestUpstreamSeries(t *testing.T) {
	e := newEnv(t, twoWorkers)
	body := chatBody("m", "hello")

	s := e.open()
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	s.requestBody(body, true)
	s.routed(true)
	s.responseHeaders(200, "text/event-stream", false, "")
	s.recv()
	s.responseBody(sse("hi"), false)
	s.recv()
	s.responseBody(`data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":8}}}`+"\n\n"+sseDone, true)
	s.recv()

	bad := e.open()
	bad.requestHeaders("/v1/completions", 5, false, nil)
	bad.requestBody(`{"x":`, true)
	bad.immediateReply()

	failed := e.open()
	failed.requestHeaders("/v1/chat/completions", len(body), false, nil)
	failed.requestBody(body, true)
	failed.routed(true)
	failed.responseHeaders(500, "application/json", false, "")
	failed.recv()

	want := `
# HELP inference_objective_request_total Requests routed, by model, target model and priority.
# TYPE inference_objective_request_total counter
inference_objective_request_total{model_name="m",priority="0",target_model_name="m"} 2
# HELP inference_objective_request_error_total Requests that failed, by model, target model and error code.
# TYPE inference_objective_request_error_total counter
inference_objective_request_error_total{error_code="BadRequest",model_name="",target_model_name=""} 1
inference_objective_request_error_total{error_code="ModelServerError",model_name="m",target_model_name="m"} 1
# HELP inference_objective_running_requests Requests routed whose response has not ended, by model.
# TYPE inference_objective_running_requests gauge
inference_objective_running_requests{model_name="m"} 0
`
	if err := testutil.GatherAndCompare(e.metrics, strings.NewReader(want),
		"inference_objective_request_total", "inference_objective_request_error_total", "inference_objective_running_requests"); err != nil {
		t.Error(err)
	}
	for name, n := range map[string]int{
		"inference_objective_input_tokens":                             1,
		"inference_objective_output_tokens":                            1,
		"inference_objective_prompt_cached_tokens":                     1,
		"inference_objective_normalized_time_per_output_token_seconds": 1,
		"inference_objective_request_duration_seconds":                 1,
		"inference_objective_request_ttft_seconds":                     1,
		"inference_objective_request_sizes":                            1,
		"inference_objective_response_sizes":                           1,
		"inference_extension_scheduler_e2e_duration_seconds":           1,
		"inference_extension_scheduler_attempts_total":                 1,
	} {
		if got, err := testutil.GatherAndCount(e.metrics, name); err != nil || got != n {
			t.Errorf("%s: %d series (%v), want %d", name, got, err, n)
		}
	}
	families, err := e.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				sums[f.GetName()] += h.GetSampleSum()
			}
		}
	}
	for name, want := range map[string]float64{
		"inference_objective_input_tokens":         12,
		"inference_objective_output_tokens":        4,
		"inference_objective_prompt_cached_tokens": 8,
	} {
		if sums[name] != want {
			t.Errorf("%s sums to %v, want the usage's %v", name, sums[name], want)
		}
	}
}

func TestRequestID(t *testing.T) {
	var logs *logRecorder
	e := newEnv(t, twoWorkers, func(o *Options) { logs = recordLogs(o) })
	body := chatBody("m", "hi")

	s := e.open()
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	s.requestBody(body, true)
	made := s.routed(true).set[RequestIDHeader]
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(made) {
		t.Errorf("request without an id: routed with x-request-id %q, want a new UUID", made)
	}

	s = e.open()
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, RequestIDHeader, "gw-42")
	s.requestBody(body, true)
	if got, ok := s.routed(true).set[RequestIDHeader]; ok {
		t.Errorf("request with an id: the picker set x-request-id %q, want it left as the gateway sent it", got)
	}

	s = e.open()
	s.requestHeaders("/v1/completions", 5, false, nil, RequestIDHeader, "gw-43")
	s.requestBody(`{"x":`, true)
	s.immediateReply()
	found := false
	for _, l := range logs.Lines() {
		if strings.Contains(l, "Rejected request") && strings.Contains(l, `"requestID"="gw-43"`) {
			found = true
		}
	}
	if !found {
		t.Errorf("no rejection log line carries the request id; logs:\n%s", logs)
	}
}

// The scheduler attempts series are bounded like the request series: model
// names a client makes up share one series past the cap, and a pod that
// leaves the pool takes its series with it, unless a pod re-created under
// the same name goes on counting them.
func TestSchedulerAttemptSeriesStayBounded(t *testing.T) {
	e := newEnv(t, nil)
	attempts := func() map[string]float64 { return counters(t, e, "inference_extension_scheduler_attempts_total") }
	routedTo := func(pod string) string {
		return "namespace=ns,pod_name=" + pod + ",port=8000,status=success,target_model_name=m"
	}
	pod := func(uid string, name string, i int) registry.Endpoint {
		return registry.Endpoint{Key: registry.Key{UID: uid, Port: 8000}, Name: name, Namespace: "ns",
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 1, byte(i)}), 8000)}
	}
	route := func() {
		t.Helper()
		body := chatBody("m", "hi")
		s := e.open()
		s.requestHeaders("/v1/chat/completions", len(body), false, nil)
		s.requestBody(body, true)
		s.routed(true)
		s.cancel()
	}

	const churn = 40
	for i := range churn {
		e.reg.Replace([]registry.Endpoint{pod(fmt.Sprint("uid-", i), fmt.Sprint("pod-", i), i)})
		route()
	}
	if got, want := attempts(), map[string]float64{routedTo(fmt.Sprint("pod-", churn-1)): 1}; !maps.Equal(got, want) {
		t.Errorf("after %d pods came and went, one routed request each: attempts %v, want only the pod still in the pool's %v", churn, got, want)
	}
	// The same pod name again (a StatefulSet's pod re-created): its count goes on.
	e.reg.Replace([]registry.Endpoint{pod("uid-again", fmt.Sprint("pod-", churn-1), churn-1)})
	route()
	if got, want := attempts(), map[string]float64{routedTo(fmt.Sprint("pod-", churn-1)): 2}; !maps.Equal(got, want) {
		t.Errorf("a pod re-created under its name: attempts %v, want %v", got, want)
	}

	// A pod that leaves while a request's pick runs: what the pick counts
	// after it left goes with the rest.
	e.picker.seen = func(*policy.Request) {
		e.picker.seen = nil
		e.reg.Replace([]registry.Endpoint{pod("uid-next", "pod-next", churn)})
	}
	route()
	if got := attempts(); len(got) != 0 {
		t.Errorf("a pod that left during its request's pick: attempts %v, want none", got)
	}

	e.picker.err = policy.ErrModelNotServed
	const models = 400
	for i := range models {
		body := chatBody(fmt.Sprint("made-up-model-", i), "hi")
		s := e.open()
		s.requestHeaders("/v1/chat/completions", len(body), false, nil)
		s.requestBody(body, true)
		s.immediateReply()
	}
	refused := 0
	for k, n := range attempts() {
		if strings.Contains(k, "status=failure") {
			refused++
			if n < 1 {
				t.Errorf("series %q counts %v", k, n)
			}
		}
	}
	errSeries, err := testutil.GatherAndCount(e.metrics, "inference_objective_request_error_total")
	if err != nil {
		t.Fatal(err)
	}
	if refused >= models || refused != errSeries {
		t.Errorf("%d refused requests for as many made-up models: %d attempt series, want the request error series' cap (%d)", models, refused, errSeries)
	}
}

// A non-streaming response over the scanner's 1 MiB limit (an embeddings
// batch: a few dozen 4096-dimension vectors) keeps its usage, which comes
// after the vectors: inference_objective_input_tokens sees the request.
func TestLargeNonStreamingResponseKeepsItsUsage(t *testing.T) {
	e := newEnv(t, twoWorkers)
	s := e.open()
	body := `{"model":"m","input":["a","b"]}`
	s.requestHeaders("/v1/embeddings", len(body), false, nil)
	s.requestBody(body, true)
	s.routed(true)
	s.responseHeaders(200, "application/json", false, "")
	s.recv()

	vec := "[" + strings.TrimSuffix(strings.Repeat("0.0123456789,", 4096), ",") + "]"
	var b strings.Builder
	b.WriteString(`{"object":"list","data":[`)
	for i := range 32 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"object":"embedding","index":0,"embedding":` + vec + `}`)
	}
	b.WriteString(`],"model":"m","usage":{"prompt_tokens":321,"total_tokens":321}}`)
	resp := b.String() // ~1.7 MB
	for resp != "" {
		n := min(len(resp), 16<<10)
		s.responseBody(resp[:n], false)
		s.recv()
		resp = resp[n:]
	}
	s.responseBody("", true)
	s.recv()

	fams, err := e.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() == "inference_objective_input_tokens" {
			for _, m := range f.GetMetric() {
				got["observations"] += float64(m.GetHistogram().GetSampleCount())
				got["sum"] += m.GetHistogram().GetSampleSum()
			}
		}
	}
	if diff := cmp.Diff(map[string]float64{"observations": 1, "sum": 321}, got); diff != "" {
		t.Errorf("inference_objective_input_tokens (-want +got):\n%s", diff)
	}
}

// TestMadeUpModelNamesTakeNoSeries sends requests for more made-up model
// names than the metrics keep series for, to a pool whose servers list
// their models: each is answered 404 and counted under __other__, and the
// model the pool serves, first asked for after them, has a series of its
// own. While no server lists its models, every name may be served and is
// given one (up to the bound).
func TestMadeUpModelNamesTakeNoSeries(t *testing.T) {
	e := newEnv(t, []string{"127.0.0.1:8000"})
	pol, err := policy.Build(policy.Config{Name: policy.LeastLoad}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	e.worker("127.0.0.1:8000").SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"llama-3-8b"}, Complete: true}, Scraped: time.Now()})
	for i := range 300 {
		s := e.open()
		body := chatBody(fmt.Sprintf("made-up-%d", i), "x")
		s.requestHeaders("/v1/chat/completions", len(body), false, nil)
		s.requestBody(body, true)
		if code, _ := s.immediateReply(); code != 404 {
			t.Fatalf("a made-up model: status %d, want 404", code)
		}
	}
	s := e.open()
	body := chatBody("llama-3-8b", "hello")
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	s.requestBody(body, true)
	s.routed(true)
	got := counters(t, e, "inference_objective_request_total")
	want := map[string]float64{
		"model_name=llama-3-8b,priority=0,target_model_name=llama-3-8b": 1,
		"model_name=__other__,priority=0,target_model_name=__other__":   0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request_total (-want +got):\n%s", diff)
	}
	errs := counters(t, e, "inference_objective_request_error_total")
	if diff := cmp.Diff(map[string]float64{"error_code=NotFound,model_name=__other__,target_model_name=__other__": 300}, errs); diff != "" {
		t.Errorf("request_error_total (-want +got):\n%s", diff)
	}
}

// Made-up model names a client has sent to a model the pool serves, by the
// rewrite header or through a rewrite rule for every model, share the
// __other__ model_name: the pool's own models, first asked for after them,
// have series of their own. A name a rewrite rule lists keeps its own,
// though no server lists it.
func TestMadeUpModelNamesSentToAServedModelTakeNoSeries(t *testing.T) {
	tbl := rewrite.NewTable()
	tbl.Set("canary", rewrite.Object{Created: time.Unix(0, 0), Rules: []rewrite.Rule{
		{Models: []string{"food-review"}, Targets: []rewrite.Target{{Model: "llama-3-8b"}}},
	}})
	e := newEnv(t, []string{"127.0.0.1:8000"}, func(o *Options) { o.Rewrites = tbl })
	pol, err := policy.Build(policy.Config{Name: policy.LeastLoad}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	e.worker("127.0.0.1:8000").SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"llama-3-8b", "mistral-7b"}, Complete: true}, Scraped: time.Now()})
	send := func(model string, headers ...string) {
		t.Helper()
		s := e.open()
		body := chatBody(model, "x")
		s.requestHeaders("/v1/chat/completions", len(body), false, nil, headers...)
		s.requestBody(body, true)
		s.routed(true)
		s.cancel()
	}
	for i := range 300 {
		send(fmt.Sprintf("made-up-%d", i), ModelRewriteHeader, "mistral-7b")
	}
	tbl.Set("catch-all", rewrite.Object{Created: time.Unix(1, 0), Rules: []rewrite.Rule{
		{Targets: []rewrite.Target{{Model: "llama-3-8b"}}},
	}})
	for i := range 300 {
		send(fmt.Sprintf("made-up-by-rule-%d", i))
	}
	send("food-review")
	send("llama-3-8b")
	want := map[string]float64{
		"model_name=__other__,priority=0,target_model_name=mistral-7b":   300,
		"model_name=__other__,priority=0,target_model_name=llama-3-8b":   300,
		"model_name=food-review,priority=0,target_model_name=llama-3-8b": 1,
		"model_name=llama-3-8b,priority=0,target_model_name=llama-3-8b":  1,
	}
	if diff := cmp.Diff(want, counters(t, e, "inference_objective_request_total")); diff != "" {
		t.Errorf("request_total (-want +got):\n%s", diff)
	}
	want = map[string]float64{
		"model_name=__other__,model_rewrite_name=catch-all,target_model=llama-3-8b": 300,
		"model_name=food-review,model_rewrite_name=canary,target_model=llama-3-8b":  1,
		// The catch-all matches the served model too, and keeps it.
		"model_name=llama-3-8b,model_rewrite_name=catch-all,target_model=llama-3-8b": 1,
	}
	if diff := cmp.Diff(want, counters(t, e, "inference_extension_model_rewrite_decisions_total")); diff != "" {
		t.Errorf("model_rewrite_decisions_total (-want +got):\n%s", diff)
	}
}

// A rewrite rule's target is the operator's name, not one a client made
// up: when no server serves it (a canary's adapter not loaded yet), the
// requests it fails are counted under it and the model they asked for, not
// under __other__ with the made-up names.
func TestRuleTargetNoServerServesKeepsItsSeries(t *testing.T) {
	tbl := rewrite.NewTable()
	tbl.Set("canary", rewrite.Object{Created: time.Unix(0, 0), Rules: []rewrite.Rule{
		{Models: []string{"food-review"}, Targets: []rewrite.Target{{Model: "food-review-v2"}}},
	}})
	tbl.Set("catch-all", rewrite.Object{Created: time.Unix(1, 0), Rules: []rewrite.Rule{
		{Targets: []rewrite.Target{{Model: "llama-3-70b"}}},
	}})
	e := newEnv(t, []string{"127.0.0.1:8000"}, func(o *Options) { o.Rewrites = tbl })
	pol, err := policy.Build(policy.Config{Name: policy.LeastLoad}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	e.worker("127.0.0.1:8000").SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"llama-3-8b"}, Adapters: []registry.Adapter{{Name: "food-review-v1", Parent: "llama-3-8b"}}, Complete: true}, Scraped: time.Now()})
	for _, model := range []string{"food-review", "made-up"} {
		s := e.open()
		body := chatBody(model, "x")
		s.requestHeaders("/v1/chat/completions", len(body), false, nil)
		s.requestBody(body, true)
		if code, _ := s.immediateReply(); code != 404 {
			t.Fatalf("a request for %s sent to a model no server serves: status %d, want 404", model, code)
		}
	}
	want := map[string]float64{
		"error_code=NotFound,model_name=food-review,target_model_name=food-review-v2": 1,
		"error_code=NotFound,model_name=__other__,target_model_name=llama-3-70b":      1,
	}
	if diff := cmp.Diff(want, counters(t, e, "inference_objective_request_error_total")); diff != "" {
		t.Errorf("request_error_total (-want +got):\n%s", diff)
	}
	want = map[string]float64{
		"namespace=,pod_name=,port=,status=failure,target_model_name=food-review-v2": 1,
		"namespace=,pod_name=,port=,status=failure,target_model_name=llama-3-70b":    1,
	}
	if diff := cmp.Diff(want, counters(t, e, "inference_extension_scheduler_attempts_total")); diff != "" {
		t.Errorf("scheduler_attempts_total (-want +got):\n%s", diff)
	}
}

package extproc

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// The pods of a split pool: two that decode and one that prefills.
const (
	decodeA = "10.0.0.1:8000"
	decodeB = "10.0.0.2:8000"
	prefill = "10.0.0.3:8000"
)

// The counters of disaggregation decisions, with their help text.
const (
	disaggDecisions = "llm_d_inference_scheduler_disagg_decision_total"
	pdDecisions     = "llm_d_inference_scheduler_pd_decision_total"
)

var decisionsHelp = map[string]string{
	disaggDecisions: "Requests routed while encode, prefill and decode are split, by target model and decision: decode-only, prefill-decode, encode-decode or encode-prefill-decode.",
	pdDecisions:     "Deprecated: llm_d_inference_scheduler_disagg_decision_total's prefill/decode part under its former name: decode-only or prefill-decode.",
}

// checkDecisions compares the decision counters e's picker exposes, model
// m alone, with want: by counter name, the count of each decision type.
func (e *env) checkDecisions(t *testing.T, want map[string]map[string]int) {
	t.Helper()
	var b strings.Builder
	names := slices.Sorted(maps.Keys(want))
	for _, name := range names {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n", name, decisionsHelp[name], name)
		for _, d := range slices.Sorted(maps.Keys(want[name])) {
			fmt.Fprintf(&b, "%s{decision_type=%q,model_name=\"m\"} %d\n", name, d, want[name][d])
		}
	}
	if err := testutil.GatherAndCompare(e.metrics, strings.NewReader(b.String()), names...); err != nil {
		t.Error(err)
	}
}

// disaggEnv serves a pool whose pods carry the given roles (by address;
// "" for no label), split at minUncached tokens, with the cache-aware
// policy and cfg's other settings.
func disaggEnv(t *testing.T, minUncached int, cfg policy.Config, roles map[string]string, opts ...envOption) *env {
	t.Helper()
	return roleEnv(t, &policy.DisaggregationConfig{MinUncachedTokens: minUncached}, cfg, roles, opts...)
}

// roleEnv is disaggEnv split as d says (nil: not split).
func roleEnv(t *testing.T, d *policy.DisaggregationConfig, cfg policy.Config, roles map[string]string, opts ...envOption) *env {
	t.Helper()
	addrs := make([]string, 0, len(roles))
	for _, a := range []string{decodeA, decodeB, prefill, "10.0.0.4:8000"} {
		if _, ok := roles[a]; ok {
			addrs = append(addrs, a)
		}
	}
	opts = append(opts, func(o *Options) { o.Disaggregation, o.MaxInFlight = d, cfg.MaxInFlight })
	e := newEnv(t, addrs, opts...)
	eps := make([]registry.Endpoint, 0, len(addrs))
	for _, w := range e.reg.Workers() {
		ep := w.Endpoint()
		role := roles[w.Address()]
		ep.Role = registry.ParseRole(role, role != "")
		eps = append(eps, ep)
	}
	e.reg.Replace(eps)
	cfg.Disaggregation = d
	pol, err := policy.Build(cfg, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.usePicker(pol)
	return e
}

// splitPool is two decode pods and a prefill pod.
var splitPool = map[string]string{decodeA: "decode", decodeB: "decode", prefill: "prefill"}

// long is a prompt of some 500 tokens (4 bytes each).
var long = strings.Repeat("a long document to read. ", 80)

// send routes a chat request with the given prompt and extra headers, and
// returns the stream and the route's reply.
func (e *env) sendChat(prompt string, extra ...string) (*session, routedReply) {
	e.t.Helper()
	s := e.open()
	body := chatBody("m", prompt)
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, extra...)
	s.requestBody(body, true)
	r := s.routed(true)
	return s, r
}

// primary is the first endpoint a route names.
func primary(r routedReply) string { return strings.Split(r.dest, ",")[0] }

// load is a worker's prefill and decode counts.
func (e *env) load(addr string) [2]int64 {
	p, d := e.worker(addr).Load()
	return [2]int64{p, d}
}

// A long prompt is prefilled on the prefill pod, which holds its load until
// the decode pod answers: its sidecar sends the response headers once the
// prefill is done. That holds with the response body streamed to the
// picker and without it (response_body_mode NONE, where no token is seen).
func TestALongPromptIsPrefilledOnAPrefillPodUntilTheDecodePodAnswers(t *testing.T) {
	for _, mode := range []extprocfilterv3.ProcessingMode_BodySendMode{extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_NONE} {
		t.Run(mode.String(), func(t *testing.T) {
			e := disaggEnv(t, 100, policy.Config{}, splitPool)
			s := e.open()
			s.requestHeadersInModes(extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, mode)
			s.requestBody(chatBody("m", long), true)
			r := s.routed(true)
			if r.set[policy.PrefillerHeader] != prefill {
				t.Fatalf("the routed request's %s = %q, want the prefill pod %s", policy.PrefillerHeader, r.set[policy.PrefillerHeader], prefill)
			}
			if strings.Contains(r.dest, prefill) || slices.Contains(r.removed, policy.PrefillerHeader) {
				t.Errorf("routed to %s, removing %v: want a decode pod, and the prefill header set rather than removed", r.dest, r.removed)
			}
			if got := e.load(prefill); got != [2]int64{1, 0} {
				t.Errorf("while the prefill runs the prefill pod's load is %v, want [1 0] (in prefill)", got)
			}
			s.responseHeaders(200, "text/event-stream", false, "")
			s.recv()
			if got := e.load(prefill); got != [2]int64{0, 0} {
				t.Errorf("after the decode pod's response headers the prefill pod's load is %v, want [0 0]", got)
			}
			if got := e.released(reasonPrefilled); got[reasonPrefilled] != 1 {
				t.Errorf("releases after the response headers %v, want one prefilled", got)
			}
			if mode == extprocfilterv3.ProcessingMode_NONE {
				closeSend(s)
			} else {
				s.responseBody(sse("hi"), false)
				s.recv()
				if got := e.load(primary(r)); got != [2]int64{0, 1} {
					t.Errorf("after the first token the decode pod's load is %v, want [0 1]", got)
				}
				s.responseBody(sseDone, true)
				s.recv()
			}
			eventually(t, "the decode pod's load to end", func() bool { return e.load(primary(r)) == [2]int64{} })
			if got := e.released(reasonPrefilled, reasonCompleted); got[reasonPrefilled] != 1 || got[reasonCompleted] != 1 {
				t.Errorf("releases %v, want one prefilled and one completed", got)
			}
		})
	}
}

func TestAShortOrCachedPromptIsDecodedAlone(t *testing.T) {
	e := disaggEnv(t, 100, policy.Config{}, splitPool)
	s, r := e.sendChat("hello")
	if v, ok := r.set[policy.PrefillerHeader]; ok {
		t.Errorf("a short prompt's request names a prefill pod, %q", v)
	}
	if got := e.load(prefill); got != [2]int64{0, 0} {
		t.Errorf("a short prompt holds load %v on the prefill pod, want none", got)
	}
	s.responseHeaders(200, "application/json", true, "")
	s.recv()

	// The long prompt goes to a decode pod, prefilled apart; the next
	// turn of the same conversation goes back there and its uncached part
	// is short.
	first, r1 := e.sendChat(long)
	if r1.set[policy.PrefillerHeader] != prefill {
		t.Fatalf("the first long request names prefill pod %q, want %s", r1.set[policy.PrefillerHeader], prefill)
	}
	first.responseHeaders(200, "application/json", true, "")
	first.recv()
	next, r2 := e.sendChat(long + " and a short question?")
	if primary(r2) != primary(r1) {
		t.Fatalf("the second turn went to %s, want the decode pod that holds the prompt, %s", primary(r2), primary(r1))
	}
	if v, ok := r2.set[policy.PrefillerHeader]; ok {
		t.Errorf("the second turn, whose decode pod holds most of it, names a prefill pod, %q", v)
	}
	next.responseHeaders(200, "application/json", true, "")
	next.recv()

	e.checkDecisions(t, map[string]map[string]int{disaggDecisions: {"decode-only": 2, "prefill-decode": 1}, pdDecisions: {"decode-only": 2, "prefill-decode": 1}})
}

// An embeddings request, whose long input is hashed as a prompt, is not
// split: llm-d's sidecar prefills apart only requests that generate. It
// names no prefill pod, holds no load there, and counts as decode-only.
func TestAnEmbeddingsRequestIsNotSplit(t *testing.T) {
	e := disaggEnv(t, 0, policy.Config{}, splitPool)
	s := e.open()
	body := `{"model":"m","input":"` + long + `"}`
	s.requestHeaders("/v1/embeddings", len(body), false, nil)
	s.requestBody(body, true)
	r := s.routed(true)
	if v, ok := r.set[policy.PrefillerHeader]; ok {
		t.Errorf("an embeddings request names prefill pod %q", v)
	}
	if got := e.load(prefill); got != [2]int64{0, 0} {
		t.Errorf("an embeddings request holds load %v on the prefill pod, want none", got)
	}
	s.responseHeaders(200, "application/json", true, "")
	s.recv()
	e.checkDecisions(t, map[string]map[string]int{disaggDecisions: {"decode-only": 1}})
}

// The prefill pod's load ends with the request, whichever way it ends
// before the decode pod answers, and with a 2xx answer however the request
// ends after it; the move to a fallback keeps it until the fallback
// answers.
func TestThePrefillPodsLoadEndsWithTheRequest(t *testing.T) {
	tests := map[string]struct {
		end       func(s *session, r routedReply)
		reason    string
		released  float64 // the guards released for reason: the decode and the prefill pods', or the decode pod's
		prefilled float64
	}{
		"the client resets": {
			end:      func(s *session, _ routedReply) { s.cancel() },
			reason:   reasonCancelled,
			released: 2,
		},
		"the decode pod answers 503": {
			end: func(s *session, _ routedReply) {
				s.responseHeaders(503, "application/json", false, "")
				s.recv()
			},
			reason:   reasonError,
			released: 2,
		},
		"an error event before the first token": {
			end: func(s *session, _ routedReply) {
				s.responseHeaders(200, "text/event-stream", false, "")
				s.recv()
				s.responseBody("data: {\"error\":{\"message\":\"boom\"}}\n\n", true)
				s.recv()
			},
			reason:    reasonError,
			released:  1,
			prefilled: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := disaggEnv(t, 100, policy.Config{}, splitPool)
			s, r := e.sendChat(long)
			if r.set[policy.PrefillerHeader] != prefill {
				t.Fatalf("no prefill pod named: %v", r.set)
			}
			tc.end(s, r)
			eventually(t, "every load to end", func() bool {
				return e.load(prefill) == [2]int64{} && e.load(primary(r)) == [2]int64{}
			})
			if got := e.releases(tc.reason); got != tc.released {
				t.Errorf("%s releases: %v, want %v", tc.reason, got, tc.released)
			}
			if got := e.releases(reasonPrefilled); got != tc.prefilled {
				t.Errorf("prefilled releases: %v, want %v", got, tc.prefilled)
			}
		})
	}

	t.Run("a fallback serves the request", func(t *testing.T) {
		e := disaggEnv(t, 100, policy.Config{}, splitPool)
		s, r := e.sendChat(long)
		fallback := strings.Split(r.dest, ",")[1]
		s.responseHeaders(200, "text/event-stream", false, fallback)
		s.recv()
		if got := e.released(reasonPrefilled, reasonFallback); got[reasonPrefilled] != 1 || got[reasonFallback] != 1 {
			t.Errorf("after the fallback answered, releases %v, want the primary's for the fallback and the prefill pod's prefilled", got)
		}
		if got := e.load(prefill); got != [2]int64{0, 0} {
			t.Errorf("after the fallback answered, the prefill pod's load is %v, want none", got)
		}
		if got := e.load(fallback); got != [2]int64{1, 0} {
			t.Errorf("the fallback's load is %v, want [1 0]", got)
		}
	})
}

// A request no prefill pod has room for, or whose only prefill pod is its
// decode pod, is decoded where it was picked: never refused for the split.
func TestWithoutARoomyPrefillPodTheDecodePodPrefills(t *testing.T) {
	t.Run("the prefill pod is full", func(t *testing.T) {
		e := disaggEnv(t, 100, policy.Config{MaxInFlight: 1}, splitPool)
		g := e.worker(prefill).Admit()
		defer g.Release()
		s, r := e.sendChat(long)
		if v, ok := r.set[policy.PrefillerHeader]; ok || r.dest == "" {
			t.Errorf("routed to %q naming prefill pod %q, want a decode pod and none", r.dest, v)
		}
		s.responseHeaders(200, "application/json", true, "")
		s.recv()
	})
	t.Run("the only prefill pod is the decode pod", func(t *testing.T) {
		e := disaggEnv(t, 0, policy.Config{}, map[string]string{decodeA: "both"})
		_, r := e.sendChat(long)
		if v, ok := r.set[policy.PrefillerHeader]; ok || primary(r) != decodeA {
			t.Errorf("routed to %q naming prefill pod %q, want %s and none", r.dest, v, decodeA)
		}
	})
	t.Run("prefill pods only decode nothing", func(t *testing.T) {
		e := disaggEnv(t, 0, policy.Config{}, map[string]string{decodeA: "", prefill: "prefill"})
		for range 5 {
			_, r := e.sendChat(long)
			if primary(r) != decodeA || r.set[policy.PrefillerHeader] != prefill {
				t.Fatalf("routed to %q naming prefill pod %q, want the unlabelled pod %s and the prefill pod %s", r.dest, r.set[policy.PrefillerHeader], decodeA, prefill)
			}
		}
	})
}

// A pool whose ready pods all only prefill has nowhere to decode: 503,
// saying so, split or not.
func TestAPoolOfPrefillPodsAloneAnswers503(t *testing.T) {
	for name, d := range map[string]*policy.DisaggregationConfig{"split": {}, "not split": nil} {
		t.Run(name, func(t *testing.T) {
			e := roleEnv(t, d, policy.Config{}, map[string]string{prefill: "prefill", decodeA: "encode"})
			s := e.open()
			body := chatBody("m", long)
			s.requestHeaders("/v1/chat/completions", len(body), false, nil)
			s.requestBody(body, true)
			if code, msg := s.immediateReply(); code != 503 || !strings.Contains(msg, "decodes") {
				t.Errorf("a request to a pool of prefill and encode pods: %d %q, want 503 saying no pod decodes", code, msg)
			}
		})
	}
}

// Without the split, a pod labelled only prefill (or encode), which has no
// sidecar to decode, takes no request, nor is it a fallback: every request
// goes to the pod without a label, and none names a prefill pod.
func TestWithoutTheSplitPrefillPodsTakeNoRequest(t *testing.T) {
	e := roleEnv(t, nil, policy.Config{}, map[string]string{decodeA: "", decodeB: "encode", prefill: "prefill"})
	for i := range 20 {
		s, r := e.sendChat(fmt.Sprint(i, long))
		if r.dest != decodeA {
			t.Fatalf("request %d routed to %q, want the unlabelled pod %s alone", i, r.dest, decodeA)
		}
		if v, ok := r.set[policy.PrefillerHeader]; ok {
			t.Fatalf("request %d names prefill pod %q without the split", i, v)
		}
		s.responseHeaders(200, "application/json", true, "")
		s.recv()
	}
}

// A parked pod that only prefills is not one a request may wait for: a
// model only it lists does not exist for the pool's decode pods (404),
// where a parked decode pod's model is unavailable for now (503).
func TestAParkedPrefillPodServesNoModel(t *testing.T) {
	e := roleEnv(t, nil, policy.Config{MetricsStaleness: policy.Duration{Duration: time.Hour}},
		map[string]string{decodeA: "decode", decodeB: "decode", prefill: "prefill"})
	serve := func(w *registry.Worker, model string) {
		w.SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{model}, Complete: true}, Scraped: time.Now()})
	}
	pre, dec := e.worker(prefill), e.worker(decodeB)
	serve(e.worker(decodeA), "live-model")
	serve(dec, "live-model")
	serve(pre, "prefilled-model")
	park(e.reg, pre, true)
	if code, msg := e.chat("prefilled-model", "").immediateReply(); code != 404 {
		t.Errorf("a request for a model only a parked prefill pod lists: %d %q, want 404", code, msg)
	}
	serve(dec, "prefilled-model")
	park(e.reg, dec, true)
	if code, msg := e.chat("prefilled-model", "").immediateReply(); code != 503 {
		t.Errorf("a request for a model a parked decode pod lists: %d %q, want 503", code, msg)
	}
}

// A chat sent to a prefixed path is decoded alone, as llm-d's sidecar
// proxies any path but the exact ones whole to its decode pod: no prefill
// pod is named, and none holds load for a prefill it would never get.
func TestAPrefixedPathIsNotSplit(t *testing.T) {
	e := disaggEnv(t, 0, policy.Config{Name: policy.LeastLoad}, splitPool)
	for _, path := range []string{"/openai/v1/chat/completions", "/v1/chat/completions/"} {
		s := e.open()
		body := chatBody("m", long)
		s.requestHeaders(path, len(body), false, nil)
		s.requestBody(body, true)
		r := s.routed(true)
		if got, ok := r.set[policy.PrefillerHeader]; ok {
			t.Errorf("%s: prefiller %q named, want none", path, got)
		}
		if got := e.load(prefill); got != [2]int64{} {
			t.Errorf("%s: the prefill pod holds %v, want nothing", path, got)
		}
		s.cancel()
	}
	_, r := e.sendChat(long)
	if r.set[policy.PrefillerHeader] != prefill {
		t.Errorf("the exact path: prefiller %q, want %s", r.set[policy.PrefillerHeader], prefill)
	}
}

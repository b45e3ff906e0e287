package extproc

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/rewrite"
)

// rewriteEnv serves with the given rewrite table and records the model each
// pick was made for.
func rewriteEnv(t *testing.T, tbl *rewrite.Table) (*env, func() []string) {
	t.Helper()
	e := newEnv(t, []string{"10.0.0.1:8000"}, func(o *Options) { o.Rewrites = tbl })
	var mu sync.Mutex
	var models []string
	e.picker.seen = func(r *policy.Request) {
		mu.Lock()
		defer mu.Unlock()
		models = append(models, r.Model)
	}
	return e, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), models...)
	}
}

func canaryTable(targets ...rewrite.Target) *rewrite.Table {
	tbl := rewrite.NewTable()
	tbl.Set("canary", rewrite.Object{Created: time.Unix(0, 0), Rules: []rewrite.Rule{
		{Models: []string{"food-review"}, Targets: targets},
	}})
	return tbl
}

// splitAt cuts s into chunks at the given offsets.
func splitAt(s string, cuts ...int) []string {
	var out []string
	last := 0
	for _, c := range cuts {
		out = append(out, s[last:c])
		last = c
	}
	return append(out, s[last:])
}

func TestModelRewrite(t *testing.T) {
	long := strings.Repeat("lorem ipsum ", 12000) // puts the model past two chunks
	cases := map[string]struct {
		chunks    []string
		headers   []string
		wantModel string // the model the body goes upstream with, and the policy saw
	}{
		"no rule: untouched": {
			chunks:    []string{chatBody("other", "hi")},
			wantModel: "other",
		},
		"rule": {
			chunks:    []string{chatBody("food-review", "hi")},
			wantModel: "food-review-v2",
		},
		"chunked, cut inside the model": {
			chunks:    splitAt(chatBody("food-review", "hi"), 3, 14, 17),
			wantModel: "food-review-v2",
		},
		"model after a long prompt": {
			chunks:    splitAt(`{"messages":[{"role":"user","content":"`+long+`"}],"stream":true,"model":"food-review"}`, 70000, 140000),
			wantModel: "food-review-v2",
		},
		"model between two long parts": {
			chunks:    splitAt(`{"messages":[{"role":"user","content":"`+long[:9000]+`"}],"model":"food-review","tools":[{"x":"`+long[:70000]+`"}]}`, 5000, 9030, 70000),
			wantModel: "food-review-v2",
		},
		"header without a rule": {
			chunks:    []string{chatBody("other", "hi")},
			headers:   []string{ModelRewriteHeader, "other-\"quoted\""},
			wantModel: "other-\"quoted\"",
		},
		"rule wins over the header": {
			chunks:    []string{chatBody("food-review", "hi")},
			headers:   []string{ModelRewriteHeader, "from-header"},
			wantModel: "food-review-v2",
		},
		"escaped model in the body": {
			chunks:    []string{`{"model":"food\u002dreview","prompt":"hi"}`},
			wantModel: "food-review-v2",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e, picked := rewriteEnv(t, canaryTable(rewrite.Target{Model: "food-review-v2"}))
			body := strings.Join(tc.chunks, "")
			path := "/v1/chat/completions"
			if strings.Contains(body, `"prompt"`) {
				path = "/v1/completions"
			}
			s := e.open()
			s.requestHeaders(path, len(body), false, nil, tc.headers...)
			for i, c := range tc.chunks {
				s.requestBody(c, i == len(tc.chunks)-1)
			}
			got := s.routed(true)

			if tc.wantModel == "other" {
				if !bytes.Equal(got.body, []byte(body)) {
					t.Fatalf("a request no rule matches came back changed:\n%s", got.body)
				}
			} else {
				want := rewrittenBody(t, body, tc.wantModel)
				if diff := cmp.Diff(want, string(got.body)); diff != "" {
					t.Fatalf("body (-want +got):\n%s", diff)
				}
			}
			if n, err := strconv.Atoi(got.set["content-length"]); err != nil || n != len(got.body) {
				t.Errorf("content-length = %q, the body has %d bytes", got.set["content-length"], len(got.body))
			}
			var doc struct{ Model string }
			if err := json.Unmarshal(got.body, &doc); err != nil || doc.Model != tc.wantModel {
				t.Errorf("the body sent upstream asks for %q (%v), want %q", doc.Model, err, tc.wantModel)
			}
			if diff := cmp.Diff([]string{tc.wantModel}, picked()); diff != "" {
				t.Errorf("models the policy picked for (-want +got):\n%s", diff)
			}
			if !containsString(got.removed, ModelRewriteHeader) {
				t.Errorf("%s is not removed before the request goes upstream: removed %v", ModelRewriteHeader, got.removed)
			}
		})
	}
}

// rewrittenBody is body with its model value replaced through a generic
// decode, the way a reader of the JSON sees it: every other field equal.
func rewrittenBody(t *testing.T, body, model string) string {
	t.Helper()
	i := strings.LastIndex(body, `"model":"`) + len(`"model":"`)
	j := i + strings.IndexByte(body[i:], '"')
	v, _ := json.Marshal(model)
	return body[:i] + string(v[1:len(v)-1]) + body[j:]
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestModelRewriteFollowsRequestID sends the same request ids twice: each
// id goes to the same target both times, and the ids spread over both
// targets by weight.
func TestModelRewriteFollowsRequestID(t *testing.T) {
	e, _ := rewriteEnv(t, canaryTable(
		rewrite.Target{Model: "food-review-v1", Weight: 3},
		rewrite.Target{Model: "food-review-v2", Weight: 1},
	))
	send := func(id string) string {
		s := e.open()
		body := chatBody("food-review", "hi")
		s.requestHeaders("/v1/chat/completions", len(body), false, nil, RequestIDHeader, id)
		s.requestBody(body, true)
		got := s.routed(true)
		s.responseHeaders(200, "text/event-stream", false, "")
		s.recv()
		s.responseBody(sseDone, true)
		s.recv()
		var doc struct{ Model string }
		if err := json.Unmarshal(got.body, &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Model
	}
	const n = 400
	first := map[string]string{}
	counts := map[string]int{}
	for i := range n {
		id := "req-" + strconv.Itoa(i)
		first[id] = send(id)
		counts[first[id]]++
	}
	for i := range 50 {
		id := "req-" + strconv.Itoa(i)
		if again := send(id); again != first[id] {
			t.Errorf("retry of %s went to %s, the first try to %s", id, again, first[id])
		}
	}
	// A quarter of 400 is 100, with a standard deviation under 9.
	if v2 := counts["food-review-v2"]; v2 < 60 || v2 > 140 {
		t.Errorf("food-review-v2 got %d of %d requests, want about 100: %v", v2, n, counts)
	}
	if counts["food-review-v1"]+counts["food-review-v2"] != n {
		t.Errorf("requests went to other models: %v", counts)
	}
}

func TestRewriteMetrics(t *testing.T) {
	e, _ := rewriteEnv(t, canaryTable(rewrite.Target{Model: "food-review-v2"}))
	for _, model := range []string{"food-review", "other", "food-review"} {
		s := e.open()
		body := chatBody(model, "hi")
		s.requestHeaders("/v1/chat/completions", len(body), false, nil)
		s.requestBody(body, true)
		s.routed(true)
	}
	want := map[string]float64{"model_name=food-review,model_rewrite_name=canary,target_model=food-review-v2": 2}
	if diff := cmp.Diff(want, counters(t, e, "inference_extension_model_rewrite_decisions_total")); diff != "" {
		t.Errorf("rewrite decisions (-want +got):\n%s", diff)
	}
	want = map[string]float64{
		"model_name=food-review,priority=0,target_model_name=food-review-v2": 2,
		"model_name=other,priority=0,target_model_name=other":                1,
	}
	if diff := cmp.Diff(want, counters(t, e, "inference_objective_request_total")); diff != "" {
		t.Errorf("requests by model and target (-want +got):\n%s", diff)
	}
}

// counters returns the values of a counter family by their labels.
func counters(t *testing.T, e *env, name string) map[string]float64 {
	t.Helper()
	mfs, err := e.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[strings.Join(labels, ",")] = m.GetCounter().GetValue()
		}
	}
	return got
}

func TestResponseNamesTheRequestedModel(t *testing.T) {
	cases := map[string]struct {
		model    string // requested
		target   string // the rule's; food-review-v2 when empty
		response []string
		want     []string
	}{
		"rewritten, streamed": {
			model: "food-review",
			response: []string{
				`data: {"id":"1","model":"food-review-v2","choices":[{"delta":{"content":"a"}}]}` + "\n\n",
				`data: {"id":"1","choices":[]}` + "\n\n",
				`data: {"model":"food-review-v2"}` + "\n\n" + `data: {"model":"food-review-v2"}` + "\n\n" + sseDone,
			},
			want: []string{
				`data: {"id":"1","model":"food-review","choices":[{"delta":{"content":"a"}}]}` + "\n\n",
				`data: {"id":"1","choices":[]}` + "\n\n",
				`data: {"model":"food-review"}` + "\n\n" + `data: {"model":"food-review"}` + "\n\n" + sseDone,
			},
		},
		"a target with &, < and >, as the server writes it back": {
			model:    "food-review",
			target:   "R&D/<llama>",
			response: []string{`data: {"id":"1","model":"R&D/<llama>","choices":[]}` + "\n\n", sseDone},
			want:     []string{`data: {"id":"1","model":"food-review","choices":[]}` + "\n\n", sseDone},
		},
		"not rewritten": {
			model:    "other",
			response: []string{`data: {"model":"food-review-v2"}` + "\n\n", sseDone},
			want:     []string{`data: {"model":"food-review-v2"}` + "\n\n", sseDone},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			target := tc.target
			if target == "" {
				target = "food-review-v2"
			}
			e, _ := rewriteEnv(t, canaryTable(rewrite.Target{Model: target}))
			s := e.open()
			body := chatBody(tc.model, "hi")
			s.requestHeaders("/v1/chat/completions", len(body), false, nil)
			s.requestBody(body, true)
			s.routed(true)
			s.responseHeaders(200, "text/event-stream", false, "")
			s.recv()
			var got []string
			for i, c := range tc.response {
				s.responseBody(c, i == len(tc.response)-1)
				got = append(got, string(s.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("response chunks (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRewriteDecisionsCountTheRequestedModelAsTarget canaries a model with
// itself as one target: every request the rule matches counts in the
// decisions, the ones that keep their model too, so the counter shows the
// split as configured.
func TestRewriteDecisionsCountTheRequestedModelAsTarget(t *testing.T) {
	e, _ := rewriteEnv(t, canaryTable(
		rewrite.Target{Model: "food-review", Weight: 3},
		rewrite.Target{Model: "food-review-v2", Weight: 1},
	))
	const n = 400
	sent := map[string]float64{}
	for i := range n {
		s := e.open()
		body := chatBody("food-review", "hi")
		s.requestHeaders("/v1/chat/completions", len(body), false, nil, RequestIDHeader, "req-"+strconv.Itoa(i))
		s.requestBody(body, true)
		got := s.routed(true)
		var doc struct{ Model string }
		if err := json.Unmarshal(got.body, &doc); err != nil {
			t.Fatal(err)
		}
		sent["model_name=food-review,model_rewrite_name=canary,target_model="+doc.Model]++
	}
	if diff := cmp.Diff(sent, counters(t, e, "inference_extension_model_rewrite_decisions_total")); diff != "" {
		t.Errorf("rewrite decisions against the models the bodies went upstream with (-want +got):\n%s", diff)
	}
}

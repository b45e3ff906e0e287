package extproc

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// A request the policy's context-length filter leaves no pod for is
// answered at once: 400 for a prompt longer than every pod's range, as a
// model server answers a prompt past its context, 503 for one the pool's
// ranges leave a gap for; each reply gives the prompt's estimated tokens.
func TestAPromptNoContextRangeHoldsIsRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		err    error
		status int
		says   string
	}{
		"longer than every range": {err: policy.ErrPromptTooLong, status: 400, says: "longer than every endpoint of the pool takes"},
		"in a gap of the ranges":  {err: policy.ErrContextLength, status: 503, says: "No ready endpoint of the pool takes a prompt of about"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			e.picker.err = tc.err
			s := e.open()
			body := chatBody("m", strings.Repeat("long context ", 4000))
			s.requestHeaders("/v1/chat/completions", len(body), false, nil)
			s.requestBody(body, true)
			code, msg := s.immediateReply()
			if code != tc.status || !strings.Contains(msg, tc.says) || !strings.Contains(msg, "about 130") {
				t.Errorf("reply %d %q, want %d saying %q and the prompt's tokens (about 130xx)", code, msg, tc.status, tc.says)
			}
			if p, d := totalLoad(e.reg.Workers()...); p+d != 0 {
				t.Errorf("load %d after the refusal, want 0", p+d)
			}
		})
	}
}

// rangedQueueEnv serves two pods that take one request at a time, labelled
// for prompts of 0-100 tokens (the first) and 101-1000 (the second), with
// the real policy's context-length filter and the flow-control queue.
func rangedQueueEnv(t *testing.T) (*env, *flowcontrol.Queue, *prometheus.Registry) {
	t.Helper()
	qreg := prometheus.NewRegistry()
	q, err := flowcontrol.New(flowcontrol.Options{Enabled: true, MaxWait: 2 * time.Second}, flowcontrol.WithRegisterer(qreg, "pool"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = q.Start(t.Context()) }()
	e := newEnv(t, twoWorkers, func(o *Options) { o.Queue, o.MaxInFlight = q, 1 })
	eps := make([]registry.Endpoint, 0, 2)
	for i, w := range e.reg.Workers() {
		ep := w.Endpoint()
		ep.Context = []registry.ContextRange{{Min: 0, Max: 100, Labelled: true}, {Min: 101, Max: 1000, Labelled: true}}[i]
		eps = append(eps, ep)
	}
	e.reg.Replace(eps)
	pol, err := policy.Build(policy.Config{MaxInFlight: 1, ContextLength: &policy.ContextLengthConfig{Filter: true}}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	return e, q, qreg
}

// chatOf opens a stream and sends a chat request of model m with prompt.
func (e *env) chatOf(prompt string) *session {
	s := e.open()
	body := chatBody("m", prompt)
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	s.requestBody(body, true)
	return s
}

// longQueued routes a long prompt on the ranged env's long-prompt pod,
// then sends another that waits in the queue behind it.
func longQueued(t *testing.T, e *env, q *flowcontrol.Queue) (busy, waiting *session) {
	t.Helper()
	long := strings.Repeat("long context ", 200) // some 650 tokens
	busy = e.chatOf(long)
	if r := busy.routed(true); r.dest != e.reg.Workers()[1].Address() {
		t.Fatalf("the long prompt went to %q, want the long-prompt pod %s", r.dest, e.reg.Workers()[1].Address())
	}
	waiting = e.chatOf(long)
	eventually(t, "the second long prompt queued", func() bool { return q.Len() == 1 })
	return busy, waiting
}

// With the context-length filter, requests waiting for the long-prompt pod
// do not hold back a short prompt, whose pod is idle: it is routed at
// once, and the long one is when its pod frees.
func TestQueuedLongPromptsDoNotHoldBackAShortOne(t *testing.T) {
	e, q, _ := rangedQueueEnv(t)
	busy, waiting := longQueued(t, e, q)
	if r := e.chatOf("hi").routed(true); r.dest != e.reg.Workers()[0].Address() {
		t.Errorf("the short prompt went to %q, want the idle short-prompt pod %s", r.dest, e.reg.Workers()[0].Address())
	}
	busy.responseHeaders(200, "application/json", true, "")
	busy.recv()
	if r := waiting.routed(true); r.dest != e.reg.Workers()[1].Address() {
		t.Errorf("the waiting long prompt went to %q, want the long-prompt pod", r.dest)
	}
}

// A prompt longer than every range is refused at once with 400, as without
// the queue, never waiting in it behind others to time out with 429.
func TestAPromptLongerThanEveryRangeNeverQueues(t *testing.T) {
	e, q, qreg := rangedQueueEnv(t)
	longQueued(t, e, q)
	outcomes := testutil.CollectAndCount(qreg, "inferpick_flowcontrol_requests_total")
	code, msg := e.chatOf(strings.Repeat("far too long ", 400)).immediateReply()
	if code != 400 || !strings.Contains(msg, "longer than every endpoint") {
		t.Errorf("a prompt longer than every range: %d %q, want 400 at once", code, msg)
	}
	if n := testutil.CollectAndCount(qreg, "inferpick_flowcontrol_requests_total"); n != outcomes || q.Len() != 1 {
		t.Errorf("%d outcome series of the queue after the refusal and %d waiting, want %d and 1: the refused prompt never went through it", n, q.Len(), outcomes)
	}
}

// A request whose label filters keep no pod is refused for its labels,
// 503, with or without the flow-control queue: never 400 as too long for
// the pods it could not go to anyway, one of which takes its prompt.
func TestAPromptTheLabelFiltersLeaveNoPodForIsRefusedForItsLabels(t *testing.T) {
	for name, queued := range map[string]bool{"without the queue": false, "with the queue": true} {
		t.Run(name, func(t *testing.T) {
			cfg := policy.Config{ContextLength: &policy.ContextLengthConfig{Filter: true},
				LabelFilters: []policy.LabelFilter{{Label: "example.com/gpu", Values: []string{"h100"}}}}
			var q *flowcontrol.Queue
			e := newEnv(t, twoWorkers, func(o *Options) {
				if queued {
					var err error
					if q, err = flowcontrol.New(flowcontrol.Options{Enabled: true, MaxWait: 2 * time.Second}); err != nil {
						t.Fatal(err)
					}
					go func() { _ = q.Start(t.Context()) }()
					o.Queue = q
				}
			})
			eps := make([]registry.Endpoint, 0, 2)
			for i, w := range e.reg.Workers() {
				ep := w.Endpoint()
				ep.Context = []registry.ContextRange{{Min: 0, Max: 100, Labelled: true}, {Min: 101, Max: 1000, Labelled: true}}[i]
				ep.Labels = registry.LabelsOf(cfg.LabelKeys(), map[string]string{"example.com/gpu": "l4"})
				eps = append(eps, ep)
			}
			e.reg.Replace(eps)
			pol, err := policy.Build(cfg, e.reg)
			if err != nil {
				t.Fatal(err)
			}
			e.server.picker = pol
			code, msg := e.chatOf(strings.Repeat("long context ", 200)).immediateReply() // some 650 tokens
			if code != 503 || !strings.Contains(msg, "label filters") {
				t.Errorf("a prompt only a left-out pod takes: %d %q, want 503 for the label filters", code, msg)
			}
		})
	}
}

// A chat's image counts no tokens towards its length, as llm-d counts only
// the text: a question about a 400 KB image goes to the short-prompt pod,
// where before its base64 made it 100,000 tokens, longer than every range,
// and refused with 400.
func TestAnImageCountsNoContextLength(t *testing.T) {
	e := newEnv(t, twoWorkers)
	eps := make([]registry.Endpoint, 0, 2)
	for i, w := range e.reg.Workers() {
		ep := w.Endpoint()
		ep.Context = []registry.ContextRange{{Min: 0, Max: 2048, Labelled: true}, {Min: 2048, Max: 32768, Labelled: true}}[i]
		eps = append(eps, ep)
	}
	e.reg.Replace(eps)
	pol, err := policy.Build(policy.Config{ContextLength: &policy.ContextLengthConfig{Filter: true}}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	s := e.open()
	body := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"What is in this picture?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("iVBO", 100_000) + `"}}]}]}`
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	s.requestBody(body, true)
	if r := s.routed(true); r.dest != e.reg.Workers()[0].Address() {
		t.Errorf("the chat about an image went to %q, want the short-prompt pod %s", r.dest, e.reg.Workers()[0].Address())
	}
}

// Refusals for a prompt no range holds repeat alike: the first is logged
// at the default verbosity, the others at V(1), as 429s are.
func TestLengthRefusalsAreLoggedOnceAtTheDefaultVerbosity(t *testing.T) {
	var logs *logRecorder
	e := newEnv(t, twoWorkers, func(o *Options) { logs = recordLogs(o) })
	e.picker.err = policy.ErrPromptTooLong
	for range 3 {
		if code, _ := e.chatOf("hi").immediateReply(); code != 400 {
			t.Fatalf("reply %d, want 400", code)
		}
	}
	n := 0
	for _, l := range logs.Lines() {
		if strings.Contains(l, "Rejected request") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d rejection lines at the default verbosity for 3 refusals, want 1; logs:\n%s", n, logs)
	}
}

package extproc

import (
	"strings"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// labelEnv serves twoWorkers carrying the labels of[i] that cfg's label
// filters read, picked by the real policy of cfg.
func labelEnv(t *testing.T, cfg policy.Config, of []map[string]string, opts ...envOption) *env {
	t.Helper()
	e := newEnv(t, twoWorkers, opts...)
	relabel(e, cfg, of)
	pol, err := policy.Build(cfg, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	e.server.opts.LabelFilter = cfg.LabelFilter()
	return e
}

// relabel gives the workers of e the labels of[i], as a label edited on a
// running pod reaches the registry: the same workers, new labels.
func relabel(e *env, cfg policy.Config, of []map[string]string) {
	at := make(map[string]map[string]string, len(of))
	for i, w := range e.reg.Workers() {
		at[w.Address()] = of[i]
	}
	relabelAt(e, cfg, at)
}

// relabelAt is relabel by the workers' addresses.
func relabelAt(e *env, cfg policy.Config, of map[string]map[string]string) {
	eps := make([]registry.Endpoint, 0, len(of))
	for _, w := range e.reg.Workers() {
		ep := w.Endpoint()
		ep.Labels = registry.LabelsOf(cfg.LabelKeys(), of[w.Address()])
		eps = append(eps, ep)
	}
	e.reg.Update(eps, nil)
}

var h100Only = policy.Config{Name: policy.LeastLoad, LabelFilters: []policy.LabelFilter{{Label: "example.com/gpu", Values: []string{"h100"}}}}

// A request the label filters leave no pod for is answered 503 at once,
// saying so, and holds no load.
func TestALabelFilterThatKeepsNoPodIsAnswered503(t *testing.T) {
	e := labelEnv(t, h100Only, []map[string]string{{"example.com/gpu": "l4"}, {}})
	code, msg := e.chatOf("hi").immediateReply()
	if code != 503 || !strings.Contains(msg, "no ready endpoint of the pool passes the policy's label filters") {
		t.Errorf("reply %d %q, want 503 naming the label filters", code, msg)
	}
	if p, d := totalLoad(e.reg.Workers()...); p+d != 0 {
		t.Errorf("load %d after the refusal, want 0", p+d)
	}
}

// With the flow-control queue too, such a request is refused at once: it
// never waits for a pod no filter will keep.
func TestALabelFilterThatKeepsNoPodNeverQueues(t *testing.T) {
	q, err := flowcontrol.New(flowcontrol.Options{Enabled: true, MaxWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = q.Start(t.Context()) }()
	e := labelEnv(t, h100Only, []map[string]string{{"example.com/gpu": "l4"}, {}}, func(o *Options) { o.Queue = q })
	code, msg := e.chatOf("hi").immediateReply()
	if code != 503 || !strings.Contains(msg, "label filters") {
		t.Errorf("reply %d %q, want 503 naming the label filters", code, msg)
	}
	if q.Len() != 0 {
		t.Errorf("%d requests wait in the queue, want none", q.Len())
	}
}

// A label edited on a running pod moves its traffic: the pod the filter
// keeps gets every request, and after the edit the other does.
func TestALabelEditMovesTraffic(t *testing.T) {
	e := labelEnv(t, h100Only, []map[string]string{{"example.com/gpu": "h100"}, {"example.com/gpu": "l4"}})
	ws := e.reg.Workers()
	for range 5 {
		if _, r := e.sendChat("hi"); primary(r) != ws[0].Address() || strings.Contains(r.dest, ws[1].Address()) {
			t.Fatalf("routed to %q, want %s alone (the other pod is an l4)", r.dest, ws[0].Address())
		}
	}
	relabel(e, h100Only, []map[string]string{{"example.com/gpu": "l4"}, {"example.com/gpu": "h100"}})
	for range 5 {
		if _, r := e.sendChat("hi"); primary(r) != ws[1].Address() || strings.Contains(r.dest, ws[0].Address()) {
			t.Fatalf("after the label edit routed to %q, want %s alone", r.dest, ws[1].Address())
		}
	}
}

// Under disaggregation each pick takes its stage's filters: with pods told
// apart by a label of their own (llm-d's P/D sample with by-label), the
// request is decoded on the pod labelled decode and prefilled on the one
// labelled prefill (prefillPods all: no pod carries llm-d.ai/role).
func TestStageLabelFiltersSplitByCustomRoleLabels(t *testing.T) {
	d := &policy.DisaggregationConfig{
		PrefillLabelFilters: []policy.LabelFilter{{Label: "role", Values: []string{"prefill"}}},
		PrefillPods:         policy.PrefillPodsAll,
	}
	cfg := policy.Config{LabelFilters: []policy.LabelFilter{{Label: "role", Values: []string{"decode"}}}, Disaggregation: d}
	roles := map[string]string{decodeA: "", decodeB: "", prefill: ""}
	e := roleEnv(t, d, cfg, roles)
	relabelAt(e, cfg, map[string]map[string]string{decodeA: {"role": "prefill"}, decodeB: {"role": "decode"}, prefill: {"role": "other"}})
	for i := range 4 {
		_, r := e.sendChat(long + strings.Repeat("x", i))
		if primary(r) != decodeB || strings.Contains(r.dest, decodeA) || strings.Contains(r.dest, prefill) {
			t.Errorf("decoded on %q, want %s alone (labelled role=decode)", r.dest, decodeB)
		}
		if got := r.set[policy.PrefillerHeader]; got != decodeA {
			t.Errorf("prefilled on %q, want %s (labelled role=prefill)", got, decodeA)
		}
	}
}

// Without a queue, a request whose one kept pod is parked is answered 503
// as one whose pods are not ready yet, which a client may retry, though a
// pod the filter leaves out is ready.
func TestAParkedPodTheFilterKeepsIsNotReadyWithoutAQueue(t *testing.T) {
	e := labelEnv(t, h100Only, []map[string]string{{"example.com/gpu": "h100"}, {"example.com/gpu": "l4"}})
	park(e.reg, e.reg.Workers()[0], true)
	if code, msg := e.chatOf("hi").immediateReply(); code != 503 || !strings.Contains(msg, "not ready") {
		t.Errorf("reply %d %q, want 503 saying the endpoints are not ready", code, msg)
	}
}

// With the flow-control queue, a request whose one kept pod is parked in a
// readiness flap waits for it, as in a pool without filters, though a pod
// the filter leaves out is ready; it then goes to the kept pod.
func TestAParkedPodTheFilterKeepsIsWaitedFor(t *testing.T) {
	q, err := flowcontrol.New(flowcontrol.Options{Enabled: true, MaxWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = q.Start(t.Context()) }()
	e := labelEnv(t, h100Only, []map[string]string{{"example.com/gpu": "h100"}, {"example.com/gpu": "l4"}}, func(o *Options) { o.Queue = q })
	h100 := e.reg.Workers()[0]
	r := routedOnceBack(t, e, q, h100, "the request for the parked h100 pod queued", func() *session { return e.chatOf("hi") })
	if r.dest != h100.Address() {
		t.Errorf("routed to %q once the h100 pod was back, want %s alone", r.dest, h100.Address())
	}
}

// A pod parked in a readiness flap that the filter leaves out is never
// waited for: with the queue, a request no kept pod may serve is answered
// 503 at once, whether the other pods are ready or parked too, and waits
// in no queue; without it, the 503 names the label filters, not pods that
// are not ready yet.
func TestAParkedPodTheFilterLeavesOutIsNotWaitedFor(t *testing.T) {
	l4s := []map[string]string{{"example.com/gpu": "l4"}, {"example.com/gpu": "l4"}}
	for _, both := range []bool{false, true} {
		q, err := flowcontrol.New(flowcontrol.Options{Enabled: true, MaxWait: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = q.Start(t.Context()) }()
		e := labelEnv(t, h100Only, l4s, func(o *Options) { o.Queue = q })
		ws := e.reg.Workers()
		park(e.reg, ws[0], true)
		if both {
			park(e.reg, ws[1], true)
		}
		if code, msg := e.chatOf("hi").immediateReply(); code != 503 || strings.Contains(msg, "saturated") {
			t.Errorf("both parked %v: reply %d %q, want 503 at once (no pod the filter keeps)", both, code, msg)
		}
	}

	e := labelEnv(t, h100Only, l4s)
	park(e.reg, e.reg.Workers()[0], true)
	if code, msg := e.chatOf("hi").immediateReply(); code != 503 || !strings.Contains(msg, "label filters") {
		t.Errorf("without a queue: reply %d %q, want 503 naming the label filters", code, msg)
	}
}

package extproc

import (
	"strings"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// park sets w's pod unready, as its readiness probe failing does: its
// worker is parked, out of the picks.
func park(reg *registry.Registry, w *registry.Worker, unready bool) {
	ep := w.Endpoint()
	ep.Unready = unready
	reg.Update([]registry.Endpoint{ep}, nil)
}

// routedOnceBack parks w, sends a request with send, waits until the
// request is queued for it (what names that wait), makes w ready again and
// returns where the request was routed.
func routedOnceBack(t *testing.T, e *env, q *flowcontrol.Queue, w *registry.Worker, what string, send func() *session) routedReply {
	t.Helper()
	park(e.reg, w, true)
	s := send()
	eventually(t, what, func() bool { return q.Len() == 1 })
	park(e.reg, w, false)
	q.Notify() // as the picker's registry listener does when a parked worker returns
	return s.routed(true)
}

// A request for a model whose one pod is parked in a readiness flap (its
// server runs on) waits in the queue for it, and goes to it once it is
// Ready again; it is not told that the model does not exist.
func TestARequestForAParkedPodsModelWaitsForIt(t *testing.T) {
	e, q := modelsEnv(t, flowcontrol.Options{}, oneModelEach)
	pod := e.reg.Workers()[0]
	r := routedOnceBack(t, e, q, pod, "the request for the parked pod's model queued", func() *session { return e.chat("model-0", "") })
	if r.dest != pod.Address() {
		t.Errorf("the request went to %q once its pod was back, want %s", r.dest, pod.Address())
	}
}

// Past the queue's max wait, a request for a parked pod's model is told the
// pool could not take it (429), not that the model does not exist (404).
func TestARequestForAParkedPodsModelTimesOut(t *testing.T) {
	e, _ := modelsEnv(t, flowcontrol.Options{MaxWait: 50 * time.Millisecond}, oneModelEach)
	park(e.reg, e.reg.Workers()[0], true)

	if code, msg := e.chat("model-0", "").immediateReply(); code != 429 || !strings.Contains(msg, "timed out") {
		t.Errorf("a request for a parked pod's model, past max wait: %d %s, want 429 timed out", code, msg)
	}
	if code, _ := e.chat("model-9", "").immediateReply(); code != 404 {
		t.Errorf("a request for a model no pod serves: %d, want 404", code)
	}
}

// Without a queue, a request for a parked pod's model is answered 503, as
// one that finds no ready endpoint: a client may retry it. A model no pod
// serves is still 404.
func TestARequestForAParkedPodsModelIsUnavailableWithoutAQueue(t *testing.T) {
	e := newEnv(t, twoWorkers)
	for i, w := range e.reg.Workers() {
		w.SetMetrics(&registry.Metrics{Served: oneModelEach(i)})
	}
	pol, err := policy.Build(policy.Config{}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	park(e.reg, e.reg.Workers()[0], true)

	if code, msg := e.chat("model-0", "").immediateReply(); code != 503 {
		t.Errorf("a request for a parked pod's model: %d %s, want 503", code, msg)
	}
	if code, _ := e.chat("model-9", "").immediateReply(); code != 404 {
		t.Errorf("a request for a model no pod serves: %d, want 404", code)
	}
}

// A request for a LoRA adapter whose base model only a parked pod serves
// is held to the rule the model filter applies to a ready pod: a pod whose
// list is read from its metrics alone may serve the adapter, so the request
// waits for it; one whose /v1/models lists the base but not the adapter
// does not (vLLM answers 404 for an adapter it has not registered), so the
// model does not exist.
func TestARequestForAnAdapterOfAParkedPodsBaseModel(t *testing.T) {
	tests := map[string]struct {
		parked   *registry.Served
		wantWait bool
	}{
		"its metrics give the base": {parked: &registry.Served{Bases: []string{"base"}}, wantWait: true},
		"its metrics give the adapter": {parked: &registry.Served{Bases: []string{"base"}, Adapters: []registry.Adapter{{Name: "base-lora"}}},
			wantWait: true},
		"its /v1/models gives the adapter": {parked: &registry.Served{Bases: []string{"base"},
			Adapters: []registry.Adapter{{Name: "base-lora", Parent: "base"}}, Complete: true}, wantWait: true},
		"its /v1/models gives the base, not the adapter": {parked: &registry.Served{Bases: []string{"base"},
			Adapters: []registry.Adapter{{Name: "base-other", Parent: "base"}}, Complete: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e, q := modelsEnv(t, flowcontrol.Options{}, func(i int) *registry.Served {
				if i == 0 {
					return tc.parked
				}
				return oneModelEach(i)
			})
			pod := e.reg.Workers()[0]
			park(e.reg, pod, true)

			s := e.chat("base-lora", "")
			if !tc.wantWait {
				if code, msg := s.immediateReply(); code != 404 {
					t.Errorf("answered %d %s, want 404", code, msg)
				}
				return
			}
			eventually(t, "the request for the adapter queued", func() bool { return q.Len() == 1 })
			park(e.reg, pod, false)
			q.Notify()
			if r := s.routed(true); r.dest != pod.Address() {
				t.Errorf("the request went to %q once its pod was back, want %s", r.dest, pod.Address())
			}
		})
	}
}

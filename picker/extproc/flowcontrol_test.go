package extproc

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// queueEnv serves ext_proc over one worker that takes one request at a time
// (maxInFlight 1, the real cache-aware policy), with the flow-control queue.
func queueEnv(t *testing.T, opts flowcontrol.Options) (*env, *flowcontrol.Queue, *prometheus.Registry) {
	t.Helper()
	return queueEnvWith(t, opts, 1)
}

// queueEnvWith is queueEnv over a worker that takes maxInFlight requests,
// reserving opts.ReservedSlots of them for prioritized requests.
func queueEnvWith(t *testing.T, opts flowcontrol.Options, maxInFlight int) (*env, *flowcontrol.Queue, *prometheus.Registry) {
	t.Helper()
	opts.Enabled = true
	qreg := prometheus.NewRegistry()
	q, err := flowcontrol.New(opts, flowcontrol.WithRegisterer(qreg, "pool"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = q.Start(t.Context()) }()
	prios := flowcontrol.NewPriorities()
	prios.Set("interactive", 10)
	prios.Set("batch", -1)
	e := newEnv(t, []string{"127.0.0.1:8000"}, func(o *Options) {
		o.Queue, o.Priorities, o.Reserve, o.MaxInFlight = q, prios, opts.Reserve, maxInFlight
	})
	pol, err := policy.Build(policy.Config{MaxInFlight: maxInFlight}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	return e, q, qreg
}

func (s *session) sendRequest(objective string) {
	body := chatBody("m", "hello")
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, ObjectiveHeader, objective)
	s.requestBody(body, true)
}

// queuedBehindOne routes a request of objective on the queue env's one
// place, then opens a second that waits in the queue behind it.
func queuedBehindOne(t *testing.T, e *env, q *flowcontrol.Queue, objective string) (routed, queued *session) {
	t.Helper()
	routed = e.open()
	routed.sendRequest(objective)
	routed.routed(true)
	queued = e.open()
	queued.sendRequest(objective)
	eventually(t, "the second request queued", func() bool { return q.Len() == 1 })
	return routed, queued
}

func TestSaturatedRequestWaitsAndIsDispatchedWhenCapacityFrees(t *testing.T) {
	e, q, _ := queueEnv(t, flowcontrol.Options{})
	first, second := queuedBehindOne(t, e, q, "interactive")
	if p, _ := e.worker("127.0.0.1:8000").Load(); p != 1 {
		t.Fatalf("load %d while one request waits, want 1: a queued request holds no guard", p)
	}

	first.responseHeaders(200, "application/json", true, "")
	first.recv()
	r := second.routed(true)
	if r.dest != "127.0.0.1:8000" {
		t.Errorf("the waiting request was routed to %q", r.dest)
	}
	if _, ok := r.set[ObjectiveHeader]; ok {
		t.Error("the objective header was set on the request, want it removed")
	}
}

func TestNegativePriorityIsShedUnderSaturation(t *testing.T) {
	e, q, _ := queueEnv(t, flowcontrol.Options{})
	first := e.open()
	first.sendRequest("interactive")
	first.routed(true)

	batch := e.open()
	batch.sendRequest("batch")
	code, msg := batch.immediateReply()
	if code != 429 || !strings.Contains(msg, "shed") {
		t.Errorf("batch request under saturation: %d %s, want 429 shed", code, msg)
	}
	if q.Len() != 0 {
		t.Errorf("%d queued, want the shed request not queued", q.Len())
	}
}

func TestUnknownObjectiveGetsPriorityZero(t *testing.T) {
	e, _, _ := queueEnv(t, flowcontrol.Options{})
	s := e.open()
	s.sendRequest("no-such-objective")
	s.routed(true)
	if n := testutil.ToFloat64(e.server.metrics.unknownObjectives); n != 1 {
		t.Errorf("unknown objectives counted %v, want 1", n)
	}
}

func TestQueueTimeoutAnswers429(t *testing.T) {
	e, _, _ := queueEnv(t, flowcontrol.Options{MaxWait: 50 * time.Millisecond})
	first := e.open()
	first.sendRequest("interactive")
	first.routed(true)

	second := e.open()
	second.sendRequest("interactive")
	code, msg := second.immediateReply()
	if code != 429 || !strings.Contains(msg, "timed out") {
		t.Errorf("waited past max wait: %d %s, want 429", code, msg)
	}
}

// Clients that go away while queued leave the queue at once: every queue
// gauge and every load ends at zero.
func TestCancellationStormIntoAFullQueue(t *testing.T) {
	e, q, qreg := queueEnv(t, flowcontrol.Options{MaxLen: 64, MaxBandLen: 64})
	holder := e.open()
	holder.sendRequest("interactive")
	holder.routed(true)

	const waiters = 200
	sessions := make([]*session, waiters)
	for i := range sessions {
		sessions[i] = e.open()
		sessions[i].sendRequest("interactive")
	}
	eventually(t, "the queue full", func() bool { return q.Len() == 64 })
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Go(s.cancel)
	}
	wg.Wait()
	holder.cancel()
	eventually(t, "queue empty and load released", func() bool {
		p, d := e.worker("127.0.0.1:8000").Load()
		return q.Len() == 0 && p == 0 && d == 0
	})
	families, err := qreg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if g := m.GetGauge(); g != nil && g.GetValue() != 0 {
				t.Errorf("%s %v = %v after the storm, want 0", f.GetName(), m.GetLabel(), g.GetValue())
			}
		}
	}
}

// A gateway that ends a waiting request's stream by closing its side
// (Envoy's graceful close when the client went away, which resets the
// stream only a second later) takes the request out of the queue at once:
// it is never dispatched, and the capacity that frees goes to a live
// request.
func TestQueuedRequestLeavesTheQueueWhenTheGatewayCloses(t *testing.T) {
	e, q, _ := queueEnv(t, flowcontrol.Options{})
	holder, gone := queuedBehindOne(t, e, q, "interactive")
	if err := gone.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the closed request out of the queue", func() bool { return q.Len() == 0 })
	if r, err := gone.stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("the closed stream got %v, %v; want its end, unanswered", r, err)
	}

	holder.responseHeaders(200, "application/json", true, "")
	holder.recv()
	live := e.open()
	live.sendRequest("interactive")
	if r := live.routed(true); r.dest != "127.0.0.1:8000" {
		t.Fatalf("the live request went to %q after the capacity freed", r.dest)
	}
	if p, d := e.worker("127.0.0.1:8000").Load(); p+d != 1 {
		t.Errorf("load (%d,%d) with one live request routed, want its guard alone", p, d)
	}
	if n := e.releases(reasonCancelled); n != 0 {
		t.Errorf("%v guards released as cancelled: the closed request was dispatched", n)
	}
}

// Requests of priority 0 leave the reserved place free: a prioritized
// request is routed at once while they wait, and they are dispatched only
// when the worker has room beyond the reserve again.
func TestReservedSlotsKeepRoomForPrioritizedRequests(t *testing.T) {
	e, q, _ := queueEnvWith(t, flowcontrol.Options{ReservedSlots: 1}, 2)
	first := e.open()
	first.sendRequest("")
	first.routed(true)

	second := e.open()
	second.sendRequest("")
	eventually(t, "the second default request queued", func() bool { return q.Len() == 1 })

	interactive := e.open()
	interactive.sendRequest("interactive")
	interactive.routed(true)
	if p, _ := e.worker("127.0.0.1:8000").Load(); p != 2 {
		t.Fatalf("load %d, want 2: the default request and the interactive one", p)
	}

	first.responseHeaders(200, "application/json", true, "")
	first.recv()
	// One place free, but it is the reserved one: the default request waits.
	eventually(t, "the first request's guard released", func() bool {
		p, d := e.worker("127.0.0.1:8000").Load()
		return p+d == 1
	})
	if q.Len() != 1 {
		t.Fatalf("%d queued with only the reserved place free, want the default request still waiting", q.Len())
	}

	interactive.responseHeaders(200, "application/json", true, "")
	interactive.recv()
	second.routed(true)
}

// Requests arriving together at an idle endpoint that takes one are
// admitted one at a time: the bound is checked and the guard taken in one
// step, so no two pass it between a pick and the guard.
func TestRequestsArrivingTogetherNeverPassMaxInFlight(t *testing.T) {
	e, q, _ := queueEnv(t, flowcontrol.Options{})
	const n = 16
	sessions := make([]*session, n)
	for i := range sessions {
		sessions[i] = e.open()
	}
	for _, s := range sessions {
		s.sendRequest("")
	}
	w := e.worker("127.0.0.1:8000")
	eventually(t, "all but one request queued", func() bool { return q.Len() == n-1 })
	if got := w.InFlight(); got != 1 {
		t.Fatalf("%d requests in flight on an endpoint that takes 1", got)
	}
}

// panicky is a policy that panics while boom is set.
type panicky struct {
	Picker
	boom atomic.Bool
}

func (p *panicky) Pick(req *policy.Request, cands []*registry.Worker, n int) ([]*registry.Worker, error) {
	if p.boom.Load() {
		panic("policy exploded")
	}
	return p.Picker.Pick(req, cands, n)
}

// A queued request's pick runs on the flow-control dispatcher's goroutine.
// A panic there ends that request's stream as a handler's panic does
// (Internal, nothing held), not the process, and the queue goes on.
func TestAQueuedPickThatPanicsEndsOnlyItsStream(t *testing.T) {
	e, q, _ := queueEnv(t, flowcontrol.Options{})
	pol := &panicky{Picker: e.server.picker}
	e.server.picker = pol
	first, second := queuedBehindOne(t, e, q, "")

	pol.boom.Store(true)
	first.responseHeaders(200, "application/json", true, "")
	first.recv()
	if _, err := second.stream.Recv(); status.Code(err) != codes.Internal {
		t.Fatalf("the request whose queued pick panicked: %v, want its stream ended with Internal", err)
	}
	if p, d := e.worker("127.0.0.1:8000").Load(); p != 0 || d != 0 {
		t.Errorf("load (%d,%d) after the panic, want 0", p, d)
	}
	pol.boom.Store(false)
	third := e.open()
	third.sendRequest("")
	third.routed(true)
}

// modelsEnv serves two pods that take one request at a time, with the real
// policy and the flow-control queue of opts; served gives each pod's model
// list.
func modelsEnv(t *testing.T, opts flowcontrol.Options, served func(i int) *registry.Served, eo ...envOption) (*env, *flowcontrol.Queue) {
	t.Helper()
	opts.Enabled = true
	q, err := flowcontrol.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = q.Start(t.Context()) }()
	e := newEnv(t, twoWorkers, append([]envOption{func(o *Options) { o.Queue, o.MaxInFlight = q, 1 }}, eo...)...)
	for i, w := range e.reg.Workers() {
		w.SetMetrics(&registry.Metrics{Served: served(i)})
	}
	pol, err := policy.Build(policy.Config{MaxInFlight: 1}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	return e, q
}

// chat opens a stream and sends a chat request for model, with the
// objective header when there is one.
func (e *env) chat(model, objective string) *session {
	s := e.open()
	body := chatBody(model, "hello")
	var extra []string
	if objective != "" {
		extra = []string{ObjectiveHeader, objective}
	}
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, extra...)
	s.requestBody(body, true)
	return s
}

func oneModelEach(i int) *registry.Served {
	return &registry.Served{Bases: []string{fmt.Sprint("model-", i)}, Complete: true}
}

// In a pool of two models, one pod each, requests waiting for the busy
// model's pod do not hold back a request for the other model, whose pod
// is free: it is routed at once, and they keep waiting.
func TestAModelWhosePodsAreFullDoesNotHoldBackAnother(t *testing.T) {
	e, q := modelsEnv(t, flowcontrol.Options{}, oneModelEach)
	send := func(model string) *session { return e.chat(model, "") }
	busy := send("model-0")
	busy.routed(true)
	var waiting []*session
	for n := 1; n <= 2; n++ {
		waiting = append(waiting, send("model-0"))
		eventually(t, "a request for the busy model queued", func() bool { return q.Len() == n })
	}

	other := send("model-1")
	if r := other.routed(true); r.dest != e.reg.Workers()[1].Address() {
		t.Errorf("the other model's request went to %q, want its pod %s", r.dest, e.reg.Workers()[1].Address())
	}
	if q.Len() != 2 {
		t.Errorf("%d requests waiting after the other model's was routed, want the busy model's 2", q.Len())
	}
	busy.responseHeaders(200, "application/json", true, "")
	busy.recv()
	if r := waiting[0].routed(true); r.dest != e.reg.Workers()[0].Address() {
		t.Errorf("the first waiting request went to %q, want the busy model's pod", r.dest)
	}
}

// A pod serves a busy base model and 16 of its LoRA adapters, each adapter
// its own set of endpoints, and one request for each adapter waits; another
// pod serves another model. When that pod frees, the request waiting for it
// behind all the adapters' is routed there, instead of waiting out
// --flow-control-max-wait and getting 429.
func TestAnIdleModelIsNotHeldBackByManyAdaptersOfABusyOne(t *testing.T) {
	var adapters []registry.Adapter
	for i := range 16 {
		adapters = append(adapters, registry.Adapter{Name: fmt.Sprintf("lora-%02d", i), Parent: "llama"})
	}
	e, q := modelsEnv(t, flowcontrol.Options{MaxWait: 10 * time.Second}, func(i int) *registry.Served {
		if i == 0 {
			return &registry.Served{Bases: []string{"llama"}, Adapters: adapters, Complete: true}
		}
		return &registry.Served{Bases: []string{"other"}, Complete: true}
	})
	ws := e.reg.Workers()
	send := func(model string) *session { return e.chat(model, "") }
	send("llama").routed(true)
	busy := send("other")
	busy.routed(true)
	for i, a := range adapters {
		send(a.Name)
		eventually(t, "a request for "+a.Name+" queued", func() bool { return q.Len() == i+1 })
	}
	waiting := send("other")
	eventually(t, "the other model's second request queued", func() bool { return q.Len() == len(adapters)+1 })

	busy.responseHeaders(200, "application/json", true, "")
	busy.recv()
	if r := waiting.routed(true); r.dest != ws[1].Address() {
		t.Errorf("the other model's request went to %q, want its pod %s", r.dest, ws[1].Address())
	}
	if n := q.Len(); n != len(adapters) {
		t.Errorf("%d waiting, want the %d adapters' requests", n, len(adapters))
	}
}

// In a pool of two models, one pod each, a request waits for the busy
// model's pod. A sheddable (negative priority) request for the other model,
// whose pod is free, is routed there; one for the busy model is shed.
func TestASheddableRequestIsShedOnlyWhenItsOwnModelIsSaturated(t *testing.T) {
	prios := flowcontrol.NewPriorities()
	prios.Set("batch", -1)
	e, q := modelsEnv(t, flowcontrol.Options{}, oneModelEach, func(o *Options) { o.Priorities = prios })
	ws := e.reg.Workers()
	send := e.chat
	send("model-0", "").routed(true)
	send("model-0", "")
	eventually(t, "a request for the busy model queued", func() bool { return q.Len() == 1 })

	if r := send("model-1", "batch").routed(true); r.dest != ws[1].Address() {
		t.Errorf("the sheddable request for the free model went to %q, want its pod %s", r.dest, ws[1].Address())
	}
	code, msg := send("model-0", "batch").immediateReply()
	if code != 429 || !strings.Contains(msg, "shed") {
		t.Errorf("sheddable request for the busy model: %d %s, want 429 shed", code, msg)
	}
	if n := q.Len(); n != 1 {
		t.Errorf("%d waiting, want the busy model's 1", n)
	}
}

// Model names come from request bodies: the flow-control series name them
// as the request's other series do, the first 256 and then __other__, so
// waiting requests for made-up models cannot grow them without bound.
func TestQueuedRequestsForMadeUpModelsKeepTheSeriesBounded(t *testing.T) {
	e, q, qreg := queueEnv(t, flowcontrol.Options{MaxLen: 1000, MaxBandLen: 1000})
	first := e.open()
	first.sendRequest("interactive")
	first.routed(true)
	for i := range 300 {
		s := e.open()
		body := chatBody(fmt.Sprint("made-up-", i), "hello")
		s.requestHeaders("/v1/chat/completions", len(body), false, nil)
		s.requestBody(body, true)
	}
	eventually(t, "300 requests queued", func() bool { return q.Len() == 300 })
	mfs, err := qreg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	models := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "inference_extension_flow_control_queue_size" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "model_name" {
					models[l.GetValue()] = true
				}
			}
		}
	}
	if len(models) > 257 || !models["__other__"] {
		t.Errorf("the queue-size series name %d models for 300 made-up ones (with __other__: %v), want at most 257", len(models), models["__other__"])
	}
}

// A request that leaves the flow-control queue unrouted, because its client
// went away or it waited past maxWait, had no pick fail: it is not counted
// as a failed scheduler attempt, as the upstream picker, which schedules a
// request only once flow control lets it go, does not count it.
func TestRequestsLeavingTheQueueAreNoFailedSchedulerAttempts(t *testing.T) {
	e, q, _ := queueEnv(t, flowcontrol.Options{MaxWait: 50 * time.Millisecond})
	_, gone := queuedBehindOne(t, e, q, "interactive")
	gone.cancel()
	eventually(t, "the cancelled request out of the queue", func() bool { return q.Len() == 0 })
	late := e.open()
	late.sendRequest("interactive")
	if code, _ := late.immediateReply(); code != 429 {
		t.Fatalf("a request that waited past maxWait: status %d, want 429", code)
	}
	want := map[string]float64{"namespace=,pod_name=pod-0,port=8000,status=success,target_model_name=m": 1}
	if diff := cmp.Diff(want, counters(t, e, "inference_extension_scheduler_attempts_total")); diff != "" {
		t.Errorf("scheduler attempts (-want +got):\n%s", diff)
	}
}

// A request without a fairness id is in the upstream picker's default flow,
// "default-flow": its waiters are counted under that fairness_id, and a
// request that names "default-flow" shares their flow.
func TestARequestWithoutAFairnessIdIsInTheDefaultFlow(t *testing.T) {
	e, q, qreg := queueEnv(t, flowcontrol.Options{})
	first := e.open()
	first.sendRequest("interactive")
	first.routed(true)
	body := chatBody("m", "hello")
	for _, extra := range [][]string{
		{ObjectiveHeader, "interactive"},
		{ObjectiveHeader, "interactive", FairnessHeader, "default-flow"},
		{ObjectiveHeader, "interactive", FairnessHeader, "tenant-a"},
	} {
		s := e.open()
		s.requestHeaders("/v1/chat/completions", len(body), false, nil, extra...)
		s.requestBody(body, true)
	}
	eventually(t, "three requests queued", func() bool { return q.Len() == 3 })
	mfs, err := qreg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "inference_extension_flow_control_queue_size" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "fairness_id" {
					got[l.GetValue()] += m.GetGauge().GetValue()
				}
			}
		}
	}
	want := map[string]float64{"default-flow": 2, "tenant-a": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("waiters by fairness_id (-want +got):\n%s", diff)
	}
}

package controllers

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/inferpick/inferpick/picker/registry"
)

// recordingSink remembers what the reconciler handed it, its endpoints
// ordered by address.
type recordingSink struct {
	eps      []registry.Endpoint
	replaces int
	updates  int
	synced   bool
	// syncs counts MarkSynced calls: each is a moment the picker reports
	// ready.
	syncs int
}

func (s *recordingSink) Replace(eps []registry.Endpoint) {
	s.eps = slices.Clone(eps)
	s.replaces++
	s.sort()
}

func (s *recordingSink) Update(upsert []registry.Endpoint, remove []registry.Key) {
	s.eps = slices.DeleteFunc(s.eps, func(e registry.Endpoint) bool {
		return slices.Contains(remove, e.Key) ||
			slices.ContainsFunc(upsert, func(u registry.Endpoint) bool { return u.Key == e.Key })
	})
	s.eps = append(s.eps, upsert...)
	s.updates++
	s.sort()
}

func (s *recordingSink) sort() {
	slices.SortFunc(s.eps, func(a, b registry.Endpoint) int { return a.Address.Compare(b.Address) })
}

func (s *recordingSink) MarkSynced()   { s.synced = true; s.syncs++ }
func (s *recordingSink) MarkUnsynced() { s.synced = false }

type fixture struct {
	client   client.Client
	sink     *recordingSink
	recorder *record.FakeRecorder
	clock    *clocktesting.FakeClock
	r        *PoolReconciler
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	f := &fixture{client: c, sink: &recordingSink{}, recorder: record.NewFakeRecorder(16), clock: clocktesting.NewFakeClock(time.Now())}
	f.r = &PoolReconciler{
		reader:   c,
		sink:     f.sink,
		recorder: f.recorder,
		clock:    f.clock,
		pool:     types.NamespacedName{Namespace: "ns", Name: "pool"},
		reported: -1,
		pods:     newPodSet(f.sink),
	}
	return f
}

// reconcile reconciles the named pods, then the pool, eventInterval after
// its last reconcile, and returns the Events recorded.
func (f *fixture) reconcile(t *testing.T, pods ...string) ([]string, error) {
	t.Helper()
	f.clock.Step(eventInterval)
	for _, name := range pods {
		if _, err := f.r.Reconcile(t.Context(), request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, pod: true}); err != nil {
			t.Fatalf("reconcile pod %s: %v", name, err)
		}
	}
	_, err := f.r.Reconcile(t.Context(), request{NamespacedName: f.r.pool})
	return f.events(), err
}

// events returns the Events recorded since it was last called.
func (f *fixture) events() []string {
	var got []string
	for {
		select {
		case e := <-f.recorder.Events:
			got = append(got, e)
		default:
			return got
		}
	}
}

func podPtr(p corev1.Pod) *corev1.Pod { return &p }

func TestReconcileMissingPool(t *testing.T) {
	f := newFixture(t, podPtr(makePod("a").ready().ip("127.0.0.1").obj()))
	f.sink.eps = []registry.Endpoint{endpoint("old", "old", "127.0.0.9:8000")}

	evs, err := f.reconcile(t)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if len(f.sink.eps) != 0 || f.sink.synced || f.sink.syncs != 0 {
		t.Errorf("sink = %v, synced %v after %d MarkSynced calls; want empty and never synced (never ready)", f.sink.eps, f.sink.synced, f.sink.syncs)
	}
	if len(evs) != 0 {
		t.Errorf("events = %q, want none without the picker's Pod to record them on", evs)
	}
}

// eventStep is a change, then a reconcile after the named pods' requests,
// and the Events it must record.
type eventStep struct {
	name   string
	change func(t *testing.T)
	pods   []string // pod requests before the pool's
	want   []string
}

func (f *fixture) runSteps(t *testing.T, steps []eventStep) {
	t.Helper()
	for _, s := range steps {
		if s.change != nil {
			s.change(t)
		}
		got, err := f.reconcile(t, s.pods...)
		if err != nil {
			t.Fatalf("%s: Reconcile: %v", s.name, err)
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s: events (-want +got):\n%s", s.name, diff)
		}
	}
}

func TestReconcileEventsOnlyOnChange(t *testing.T) {
	pod := podPtr(makePod("a").ready().ip("127.0.0.1").obj())
	f := newFixture(t, makePool("pool", 8000).obj(), pod)

	steps := []eventStep{
		{name: "first sync announces the count", want: []string{"Normal EndpointsChanged 1 ready endpoints"}},
		{name: "nothing changed", want: nil},
		{
			name: "second pod",
			change: func(t *testing.T) {
				create(t, f.client, podPtr(makePod("b").ready().ip("127.0.0.2").obj()))
			},
			pods: []string{"b"},
			want: []string{"Normal EndpointsChanged 2 ready endpoints (was 1)"},
		},
		{
			name: "both pods gone",
			change: func(t *testing.T) {
				del(t, f.client, pod)
				del(t, f.client, podPtr(makePod("b").obj()))
			},
			pods: []string{"a", "b"},
			want: []string{"Warning NoReadyEndpoints No ready pod matches the selector; requests to the pool cannot be served"},
		},
		{name: "still none", want: nil},
	}
	f.runSteps(t, steps)
}

func TestReconcileInvalidSelector(t *testing.T) {
	pool := makePool("pool", 8000).selector(map[string]string{"bad key!": "x"}).obj()
	f := newFixture(t, pool, podPtr(makePod("a").ready().ip("127.0.0.1").obj()))

	for i := range 2 {
		evs, err := f.reconcile(t)
		if !errorsIsTerminal(err) {
			t.Fatalf("reconcile %d: error = %v, want a terminal error", i, err)
		}
		if len(f.sink.eps) != 0 || !f.sink.synced {
			t.Errorf("reconcile %d: sink = %v, synced %v; want empty and synced", i, f.sink.eps, f.sink.synced)
		}
		wantEvents := 0
		if i == 0 {
			wantEvents = 1
		}
		if len(evs) != wantEvents {
			t.Errorf("reconcile %d: events = %q, want %d", i, evs, wantEvents)
		}
	}
}

func errorsIsTerminal(err error) bool {
	return errors.Is(err, reconcile.TerminalError(nil))
}

func create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(t.Context(), obj); err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
}

func del(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Delete(t.Context(), obj); err != nil {
		t.Fatalf("delete %s: %v", obj.GetName(), err)
	}
}

// A pool deleted and re-created between two reconciles (kubectl replace
// --force, a GitOps tool re-creating it) is a new object: it gets its own
// Event, though its count equals the old pool's.
func TestReconcileRecreatedPoolAnnouncesItsCount(t *testing.T) {
	pool := makePool("pool", 8000).obj()
	pool.UID = "uid-pool-1"
	f := newFixture(t, pool, podPtr(makePod("a").ready().ip("127.0.0.1").obj()))
	want := []string{"Normal EndpointsChanged 1 ready endpoints"}
	got, err := f.reconcile(t)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("first pool: events (-want +got):\n%s", diff)
	}

	del(t, f.client, pool)
	again := makePool("pool", 8000).obj()
	again.UID = "uid-pool-2"
	create(t, f.client, again)
	got, err = f.reconcile(t)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("re-created pool: events (-want +got):\n%s", diff)
	}
}

// A replica that takes the lease back announces the count it sees, even the
// one it announced in its earlier term: in between, the other leader may
// have announced other counts, or gone before it announced the last.
func TestReconcileRegainedLeaseAnnouncesTheCount(t *testing.T) {
	f := newFixture(t, makePool("pool", 8000).obj(), podPtr(makePod("a").ready().ip("127.0.0.1").obj()))
	leading := false
	f.r.leading = func() bool { return leading }
	f.r.terms = new(atomic.Uint64)
	gained := make(chan struct{})
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[request]())
	defer q.ShutDown()
	if err := onGain(gained, f.r.terms, only(request{NamespacedName: f.r.pool})).Start(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	// gain takes the lease as the elector does, and waits for the pool's
	// reconcile it asks for.
	gain := func() {
		leading = true
		gained <- struct{}{}
		req, _ := q.Get()
		q.Done(req)
	}

	b := podPtr(makePod("b").ready().ip("127.0.0.2").obj())
	steps := []eventStep{
		{name: "first term", change: func(*testing.T) { gain() }, want: []string{"Normal EndpointsChanged 1 ready endpoints"}},
		{
			name: "lease lost; a second pod, announced by the other leader",
			change: func(t *testing.T) {
				leading = false
				create(t, f.client, b)
			},
			pods: []string{"b"},
		},
		{name: "it goes before the other leader announces it", change: func(t *testing.T) { del(t, f.client, b) }, pods: []string{"b"}},
		{name: "lease regained", change: func(*testing.T) { gain() }, want: []string{"Normal EndpointsChanged 1 ready endpoints"}},
		{name: "nothing changed in this term", want: nil},
	}
	f.runSteps(t, steps)
}

// The pool's endpoint count is announced at most once an eventInterval: a
// change sooner than that is announced when the interval is over, with the
// count the pool then has, so the last Event always states the count.
func TestReconcileCountChangedTooSoonIsAnnouncedWhenItSettles(t *testing.T) {
	f := newFixture(t, makePool("pool", 8000).obj(), podPtr(makePod("a").ready().ip("127.0.0.1").obj()))
	if got, err := f.reconcile(t); err != nil || len(got) != 1 {
		t.Fatalf("first sync: events %q, error %v; want the count", got, err)
	}
	poolReq := request{NamespacedName: f.r.pool}
	for i, name := range []string{"b", "c"} {
		create(t, f.client, podPtr(makePod(name).ready().ip(fmt.Sprintf("127.0.0.%d", i+2)).obj()))
		if _, err := f.r.Reconcile(t.Context(), request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, pod: true}); err != nil {
			t.Fatal(err)
		}
		res, err := f.r.Reconcile(t.Context(), poolReq)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.events(); len(got) != 0 || res.RequeueAfter != eventInterval {
			t.Fatalf("pod %s ready at once: events %q, requeue after %v; want none, and another look in %v", name, got, res.RequeueAfter, eventInterval)
		}
	}

	f.clock.Step(eventInterval)
	res, err := f.r.Reconcile(t.Context(), poolReq)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Normal EndpointsChanged 3 ready endpoints (was 1)"}, f.events()); diff != "" || res.RequeueAfter != 0 {
		t.Errorf("the interval over: requeue after %v, events (-want +got):\n%s", res.RequeueAfter, diff)
	}
}

// A rolling restart of 16 pods changes the pool's count 32 times in half a
// minute. Every change the reconciler records gets through the picker's
// event correlation, as one Event object whose message is the latest, which
// `kubectl describe` shows.
func TestEventCorrelationKeepsEveryCountOfARollingRestart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := record.NewEventCorrelatorWithOptions(eventCorrelation(clk))
	pool := corev1.ObjectReference{Kind: "InferencePool", APIVersion: "inference.networking.k8s.io/v1", Namespace: "ns", Name: "pool", UID: "uid-pool"}
	var (
		dropped []string
		last    *corev1.Event // the API server's copy of the last one written
		objects = map[string]bool{}
	)
	const n = 16
	for i := range 2 * n {
		clk.Step(eventInterval)
		was, now := n, n+1
		if i%2 == 1 {
			was, now = n+1, n
		}
		msg := fmt.Sprintf("%d ready endpoints (was %d)", now, was)
		got, err := c.EventCorrelate(&corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("pool.%d", i), Namespace: "ns"},
			InvolvedObject: pool, Reason: ReasonEndpointsChanged, Message: msg, Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: Name}, Count: 1,
			FirstTimestamp: metav1.NewTime(clk.Now()), LastTimestamp: metav1.NewTime(clk.Now()),
		})
		if err != nil {
			t.Fatalf("change %d (%s): %v", i+1, msg, err)
		}
		if got.Skip {
			dropped = append(dropped, msg)
			continue
		}
		last = got.Event.DeepCopy()
		objects[last.Name] = true
		c.UpdateState(last)
	}
	if len(dropped) > 0 {
		t.Errorf("%d of %d count changes dropped, the last %q", len(dropped), 2*n, dropped[len(dropped)-1])
	}
	if want := fmt.Sprintf("%d ready endpoints (was %d)", n, n+1); last.Message != want {
		t.Errorf("the pool's last Event says %q, want %q", last.Message, want)
	}
	if len(objects) != 1 || last.Count != 2*n {
		t.Errorf("%d Event objects, the last of count %d; want one, patched %d times", len(objects), last.Count, 2*n)
	}
}

// The pool's Events name their reporting controller, which kubectl events
// and other readers of events.k8s.io/v1 show, though client-go's
// aggregation, through which each of them goes, leaves it out.
func TestEventsNameTheirReportingController(t *testing.T) {
	sink := sinkRecorder(make(chan *corev1.Event, 1))
	b := record.NewBroadcaster(record.WithCorrelatorOptions(eventCorrelation(clocktesting.NewFakeClock(time.Now()))))
	defer b.Shutdown()
	b.StartRecordingToSink(reporting{sink})
	rec := b.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: Name})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	rec.Event(pod, corev1.EventTypeNormal, ReasonEndpointsChanged, "1 ready endpoints")
	if e := <-sink; e.ReportingController != Name {
		t.Errorf("the Event written names reporting controller %q, want %q", e.ReportingController, Name)
	}
}

// sinkRecorder is an event sink that passes on the first Event created.
type sinkRecorder chan *corev1.Event

func (s sinkRecorder) Create(e *corev1.Event) (*corev1.Event, error) {
	select {
	case s <- e.DeepCopy():
	default:
	}
	return e, nil
}

func (s sinkRecorder) Update(e *corev1.Event) (*corev1.Event, error) { return e, nil }

func (s sinkRecorder) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) { return e, nil }

package controllers

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
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

func (s *recordingSink) MarkSynced()   { s.synced = true }
func (s *recordingSink) MarkUnsynced() { s.synced = false }

type fixture struct {
	client   client.Client
	sink     *recordingSink
	recorder *record.FakeRecorder
	r        *PoolReconciler
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	f := &fixture{client: c, sink: &recordingSink{}, recorder: record.NewFakeRecorder(16)}
	f.r = &PoolReconciler{
		reader:   c,
		sink:     f.sink,
		recorder: f.recorder,
		pool:     types.NamespacedName{Namespace: "ns", Name: "pool"},
		reported: -1,
		pods:     newPodSet(f.sink),
	}
	return f
}

// reconcile reconciles the named pods, then the pool, and returns the
// Events recorded.
func (f *fixture) reconcile(t *testing.T, pods ...string) ([]string, error) {
	t.Helper()
	for _, name := range pods {
		if _, err := f.r.Reconcile(t.Context(), request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, pod: true}); err != nil {
			t.Fatalf("reconcile pod %s: %v", name, err)
		}
	}
	_, err := f.r.Reconcile(t.Context(), request{NamespacedName: f.r.pool})
	var got []string
	for {
		select {
		case e := <-f.recorder.Events:
			got = append(got, e)
		default:
			return got, err
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
	if len(f.sink.eps) != 0 || f.sink.synced {
		t.Errorf("sink = %v, synced %v; want empty and not synced (not ready)", f.sink.eps, f.sink.synced)
	}
	if len(evs) != 0 {
		t.Errorf("events = %q, want none without the picker's Pod to record them on", evs)
	}
}

func TestReconcileEventsOnlyOnChange(t *testing.T) {
	pod := podPtr(makePod("a").ready().ip("127.0.0.1").obj())
	f := newFixture(t, makePool("pool", 8000).obj(), pod)

	steps := []struct {
		name   string
		change func(t *testing.T)
		pods   []string // pod requests before the pool's
		want   []string
	}{
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
	if err := onGain(gained, f.r.terms, request{NamespacedName: f.r.pool}).Start(t.Context(), q); err != nil {
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
	steps := []struct {
		name   string
		change func(t *testing.T)
		pods   []string
		want   []string
	}{
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

package controllers

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/inferpick/inferpick/picker/registry"
)

// countingSink is a real registry that counts how it was written to.
type countingSink struct {
	*registry.Registry
	replaces, updates int
}

func (s *countingSink) Replace(eps []registry.Endpoint) { s.replaces++; s.Registry.Replace(eps) }
func (s *countingSink) Update(up []registry.Endpoint, rm []registry.Key) {
	s.updates++
	s.Registry.Update(up, rm)
}

// TestPodEventTouchesOnlyThatPod runs a pool of three pods through pod
// events one at a time and checks that each changes the worker of its own
// pod only: the other workers stay the same objects, and no event makes
// the reconciler replace the whole set.
func TestPodEventTouchesOnlyThatPod(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{
		"a": podPtr(makePod("a").ready().ip("10.0.0.1").obj()),
		"b": podPtr(makePod("b").ready().ip("10.0.0.2").obj()),
		"c": podPtr(makePod("c").ready().ip("10.0.0.3").obj()),
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(makePool("pool", 8000).obj(), pods["a"], pods["b"], pods["c"]).
		WithStatusSubresource(&corev1.Pod{}).Build()
	sink := &countingSink{Registry: registry.New()}
	r := &PoolReconciler{
		reader: c, sink: sink, recorder: record.NewFakeRecorder(64), clock: clock.RealClock{},
		pool: types.NamespacedName{Namespace: "ns", Name: "pool"}, reported: -1, pods: newPodSet(sink),
	}
	announced := 0
	r.announce = func() { announced++ }
	reconcilePod := func(name string) {
		t.Helper()
		if _, err := r.Reconcile(t.Context(), request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, pod: true}); err != nil {
			t.Fatalf("reconcile pod %s: %v", name, err)
		}
	}

	// Pod events before the pool is known wait for its list.
	reconcilePod("a")
	if len(sink.Workers()) != 0 || sink.updates != 0 {
		t.Fatalf("a pod event before the pool's reconcile wrote %d workers", len(sink.Workers()))
	}
	if _, err := r.Reconcile(t.Context(), request{NamespacedName: r.pool}); err != nil {
		t.Fatal(err)
	}
	if sink.replaces != 1 || len(sink.Workers()) != 3 {
		t.Fatalf("after the pool's reconcile: %d replaces, %d workers; want 1 and 3", sink.replaces, len(sink.Workers()))
	}

	byName := func() map[string]*registry.Worker {
		out := map[string]*registry.Worker{}
		for _, w := range sink.Workers() {
			out[w.Endpoint().Name] = w
		}
		return out
	}
	steps := []struct {
		name    string
		pod     string
		change  func(t *testing.T) // nil: an event that changes nothing that matters
		want    []string           // pod names with a worker afterwards
		changed bool               // whether pod's worker is a new object, parked or gone
	}{
		{name: "an unrelated change", pod: "b", change: func(t *testing.T) {
			update(t, c, pods["b"], func(p *corev1.Pod) { p.Annotations = map[string]string{"x": "y"} })
		}, want: []string{"a", "b", "c"}},
		{name: "b stops being ready", pod: "b", change: func(t *testing.T) {
			updateStatus(t, c, pods["b"], func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse })
		}, want: []string{"a", "c"}, changed: true},
		{name: "b ready again", pod: "b", change: func(t *testing.T) {
			updateStatus(t, c, pods["b"], func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionTrue })
		}, want: []string{"a", "b", "c"}, changed: true},
		{name: "c moves to another IP", pod: "c", change: func(t *testing.T) {
			updateStatus(t, c, pods["c"], func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.9" })
		}, want: []string{"a", "b", "c"}, changed: true},
		{name: "a re-created under the same name and IP", pod: "a", change: func(t *testing.T) {
			del(t, c, pods["a"])
			pods["a"] = podPtr(makePod("a").uid("uid-a2").ready().ip("10.0.0.1").obj())
			create(t, c, pods["a"])
		}, want: []string{"a", "b", "c"}, changed: true},
		{name: "a label stops matching", pod: "a", change: func(t *testing.T) {
			update(t, c, pods["a"], func(p *corev1.Pod) { p.Labels = map[string]string{"app": "other"} })
		}, want: []string{"b", "c"}, changed: true},
		{name: "c deleted", pod: "c", change: func(t *testing.T) { del(t, c, pods["c"]) }, want: []string{"b"}, changed: true},
	}
	for _, s := range steps {
		before := byName()
		replaces, updates, announcedBefore := sink.replaces, sink.updates, announced
		s.change(t)
		reconcilePod(s.pod)
		after := byName()

		var names []string
		for _, w := range sink.Workers() {
			names = append(names, w.Endpoint().Name)
		}
		slices.Sort(names)
		if diff := cmp.Diff(s.want, names); diff != "" {
			t.Errorf("%s: workers (-want +got):\n%s", s.name, diff)
		}
		for name, w := range before {
			if name == s.pod {
				continue
			}
			if after[name] != w || w.Removed() {
				t.Errorf("%s: the worker of pod %s was replaced", s.name, name)
			}
		}
		if old, now := before[s.pod], after[s.pod]; (old != now) != s.changed {
			t.Errorf("%s: the worker of pod %s changed = %v, want %v", s.name, s.pod, old != now, s.changed)
		}
		if old := before[s.pod]; old != nil && s.changed && old.Live() {
			t.Errorf("%s: the old worker of pod %s is not marked removed or parked", s.name, s.pod)
		}
		if sink.replaces != replaces {
			t.Errorf("%s: a pod event replaced the whole set", s.name)
		}
		wantWrites := 0
		if s.changed {
			wantWrites = 1
		}
		if sink.updates-updates != wantWrites || announced-announcedBefore != wantWrites {
			t.Errorf("%s: %d updates and %d announcements, want %d of each", s.name, sink.updates-updates, announced-announcedBefore, wantWrites)
		}
	}
}

func update(t *testing.T, c client.Client, pod *corev1.Pod, change func(*corev1.Pod)) {
	t.Helper()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	change(pod)
	if err := c.Update(t.Context(), pod); err != nil {
		t.Fatalf("update %s: %v", pod.Name, err)
	}
}

func updateStatus(t *testing.T, c client.Client, pod *corev1.Pod, change func(*corev1.Pod)) {
	t.Helper()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	change(pod)
	if err := c.Status().Update(t.Context(), pod); err != nil {
		t.Fatalf("update status of %s: %v", pod.Name, err)
	}
}

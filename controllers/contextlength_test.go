package controllers

import (
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// A pod's context-length label becomes its worker's range, and an edit
// while the pod runs changes the range of the same worker, with the request
// in flight on it. A value that does not parse is logged, naming the pod,
// once while it stays (not on every sync), and the pod counts as
// unlabelled.
func TestAContextLengthLabelEditKeepsTheWorker(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	const label = policy.DefaultContextLengthLabel
	pod := podPtr(makePod("a").ready().ip("10.0.0.1").obj())
	pod.Labels[label] = "0-2048"
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(makePool("pool", 8000).obj(), pod).Build()
	reg := registry.New()
	r := &PoolReconciler{
		reader: c, sink: reg, recorder: record.NewFakeRecorder(64), clock: clock.RealClock{},
		pool: types.NamespacedName{Namespace: "ns", Name: "pool"}, reported: -1, pods: newPodSet(reg), announce: func() {},
	}
	r.pods.contextLabel = label
	var mu sync.Mutex
	var logged []string
	ctx := ctrl.LoggerInto(t.Context(), funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{}))
	if _, err := r.Reconcile(ctx, request{NamespacedName: r.pool}); err != nil {
		t.Fatal(err)
	}
	w := reg.Workers()[0]
	if got := w.ContextRange().String(); got != "0-2048" {
		t.Fatalf("the pod labelled 0-2048 has range %q", got)
	}
	g := w.Admit()
	defer g.Release()

	for _, step := range []struct {
		value string // "" removes the label
		want  string
		log   bool
	}{
		{value: "2048-8192", want: "2048-8192"},
		{value: "8k", want: "", log: true},
		{value: "8k", want: ""},
		{value: "", want: ""},
		{value: "8k", want: "", log: true},
		{value: "0-131072", want: "0-131072"},
	} {
		update(t, c, pod, func(p *corev1.Pod) {
			if step.value == "" {
				delete(p.Labels, label)
			} else {
				p.Labels[label] = step.value
			}
		})
		mu.Lock()
		logged = nil
		mu.Unlock()
		if _, err := r.Reconcile(ctx, podRequest(pod)); err != nil {
			t.Fatal(err)
		}
		if got := reg.Workers(); len(got) != 1 || got[0] != w || w.InFlight() != 1 {
			t.Fatalf("label %q: the pod's worker was replaced or lost its load (%d in flight)", step.value, w.InFlight())
		}
		if got := w.ContextRange().String(); got != step.want {
			t.Errorf("label %q: range %q, want %q", step.value, got, step.want)
		}
		mu.Lock()
		text := strings.Join(logged, "\n")
		mu.Unlock()
		if said := strings.Contains(text, "Context-length label does not parse") && strings.Contains(text, `"name"="a"`) &&
			strings.Contains(text, label) && strings.Contains(text, `8k`); said != step.log {
			t.Errorf("label %q: logged %q; want a line naming the pod, the label and the value: %v", step.value, text, step.log)
		}
	}
}

// Without a label to read, a labelled pod's worker has no range; the
// selector controller reads the label as the pool controller does.
func TestTheContextLengthLabelIsReadOnlyWhenNamed(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	pod := podPtr(makePod("a").ready().ip("10.0.0.1").obj())
	pod.Labels["example.com/prompt-tokens"] = "0-4096"
	sel, err := labels.Parse("app=vllm")
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels["app"] = "vllm"
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod).Build()
	for label, want := range map[string]string{"": "", policy.DefaultContextLengthLabel: "", "example.com/prompt-tokens": "0-4096"} {
		reg := registry.New()
		r := &SelectorReconciler{reader: c, sink: reg, pods: newPodSet(reg), opts: SelectorOptions{Namespace: "ns", Selector: sel, Ports: []int32{8000}}}
		r.pods.contextLabel = label
		if _, err := r.Reconcile(t.Context(), request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "selected-pods"}}); err != nil {
			t.Fatal(err)
		}
		if ws := reg.Workers(); len(ws) != 1 || ws[0].ContextRange().String() != want {
			t.Errorf("reading label %q: workers %d, range %q; want 1 with %q", label, len(ws), ws[0].ContextRange(), want)
		}
	}
}

// The selector controller reads the labels the policy's label filters name
// into its workers, those alone, as the pool controller does.
func TestTheSelectorControllerReadsTheFilteredLabels(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	pod := podPtr(makePod("a").ready().ip("10.0.0.1").obj())
	pod.Labels["app"] = "vllm"
	pod.Labels["example.com/gpu"] = "h100"
	sel, err := labels.Parse("app=vllm")
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod).Build()
	reg := registry.New()
	r := &SelectorReconciler{reader: c, sink: reg, pods: newPodSet(reg), opts: SelectorOptions{Namespace: "ns", Selector: sel, Ports: []int32{8000}}}
	r.pods.labelKeys = []string{"example.com/gpu", "example.com/zone"}
	if _, err := r.Reconcile(t.Context(), request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "selected-pods"}}); err != nil {
		t.Fatal(err)
	}
	ws := reg.Workers()
	if len(ws) != 1 {
		t.Fatalf("%d workers, want 1", len(ws))
	}
	if got := ws[0].Labels().Map(); len(got) != 1 || got["example.com/gpu"] != "h100" {
		t.Errorf("the worker's labels %v, want example.com/gpu=h100 alone", got)
	}
}

// A pod whose context-length label does not parse is logged again when it
// comes back after a resync that no longer held it (its pool's selector
// left it out, then took it in again): what was logged of it went with it.
func TestAnUnparsedLabelIsLoggedAgainWhenItsPodComesBack(t *testing.T) {
	const label = policy.DefaultContextLengthLabel
	pod := makePod("a").ready().ip("10.0.0.1").obj()
	pod.Labels[label] = "8k"
	ps := newPodSet(registry.New())
	ps.contextLabel = label
	var logged int
	ctx := ctrl.LoggerInto(t.Context(), funcr.New(func(_, args string) {
		if strings.Contains(args, "Context-length label does not parse") {
			logged++
		}
	}, funcr.Options{}))
	for i, pods := range [][]corev1.Pod{{pod}, nil, {pod}} {
		ps.reset(ctx, []int32{8000}, pods)
		if i == 1 {
			continue
		}
		if logged != 1 {
			t.Errorf("resync %d with the pod: logged it %d times, want once", i, logged)
		}
		logged = 0
	}
}

package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// A pod's llm-d.ai/role label edited while it runs changes its worker's
// role: the same worker, with the request in flight on it, moves between
// the registry's decoders and prefillers.
func TestARoleLabelEditKeepsTheWorker(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	pod := podPtr(makePod("a").ready().ip("10.0.0.1").obj())
	pod.Labels[policy.RoleLabel] = "decode"
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(makePool("pool", 8000).obj(), pod).Build()
	reg := registry.New()
	r := &PoolReconciler{
		reader: c, sink: reg, recorder: record.NewFakeRecorder(64), clock: clock.RealClock{},
		pool: types.NamespacedName{Namespace: "ns", Name: "pool"}, reported: -1, pods: newPodSet(reg), announce: func() {},
	}
	if _, err := r.Reconcile(t.Context(), request{NamespacedName: r.pool}); err != nil {
		t.Fatal(err)
	}
	if len(reg.Decoders()) != 1 || len(reg.Prefillers()) != 0 {
		t.Fatalf("a decode pod: %d decoders, %d prefillers; want 1 and 0", len(reg.Decoders()), len(reg.Prefillers()))
	}
	w := reg.Workers()[0]
	g := w.Admit()
	defer g.Release()

	for _, step := range []struct {
		label             string // "" removes it
		decodes, prefills int
	}{
		{label: "prefill", prefills: 1},
		{label: "both", decodes: 1, prefills: 1},
		{label: "", decodes: 1},
		{label: "encode"},
	} {
		update(t, c, pod, func(p *corev1.Pod) {
			if step.label == "" {
				delete(p.Labels, policy.RoleLabel)
			} else {
				p.Labels[policy.RoleLabel] = step.label
			}
		})
		if _, err := r.Reconcile(t.Context(), podRequest(pod)); err != nil {
			t.Fatal(err)
		}
		if got := reg.Workers(); len(got) != 1 || got[0] != w || w.InFlight() != 1 {
			t.Fatalf("label %q: the pod's worker was replaced or lost its load (%d in flight)", step.label, w.InFlight())
		}
		if len(reg.Decoders()) != step.decodes || len(reg.Prefillers()) != step.prefills {
			t.Errorf("label %q: %d decoders, %d prefillers; want %d and %d", step.label, len(reg.Decoders()), len(reg.Prefillers()), step.decodes, step.prefills)
		}
	}
}

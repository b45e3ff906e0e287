package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestSelectorReconcile(t *testing.T) {
	sel, err := labels.Parse("app=vllm,tier in (gpu)")
	if err != nil {
		t.Fatal(err)
	}
	gpu := func(p *podWrapper) *podWrapper { p.Labels["tier"] = "gpu"; return p }
	obj := func(p *podWrapper) client.Object { o := p.obj(); return &o }
	cases := map[string]struct {
		pods []client.Object
		want []string // endpoint addresses
	}{
		"ready matching pods on every port": {
			pods: []client.Object{
				obj(gpu(makePod("b")).ready().ip("10.0.0.2")),
				obj(gpu(makePod("a")).ready().ip("10.0.0.1")),
			},
			want: []string{"10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:8000", "10.0.0.2:8001"},
		},
		"not matching, not ready, other namespace": {
			pods: []client.Object{
				obj(makePod("cpu").ready().ip("10.0.0.3")),
				obj(gpu(makePod("starting")).ip("10.0.0.4")),
				func() client.Object {
					p := gpu(makePod("elsewhere")).ready().ip("10.0.0.5")
					p.Namespace = "other"
					return obj(p)
				}(),
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			scheme, err := NewScheme()
			if err != nil {
				t.Fatal(err)
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.pods...).Build()
			sink := &recordingSink{}
			r := &SelectorReconciler{reader: c, sink: sink, pods: newPodSet(sink), opts: SelectorOptions{Namespace: "ns", Selector: sel, Ports: []int32{8000, 8001}}}
			if _, err := r.Reconcile(t.Context(), request{}); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ep := range sink.eps {
				if !ep.Unready {
					got = append(got, ep.Address.String())
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			if !sink.synced {
				t.Error("sink not marked synced")
			}
		})
	}
}

func TestSelectorOptionsValidate(t *testing.T) {
	if err := (SelectorOptions{}).Validate(); err == nil {
		t.Error("empty options accepted")
	}
	if err := (SelectorOptions{Namespace: "ns", Selector: labels.Everything(), Ports: []int32{1}}).Validate(); err == nil {
		t.Error("a selector matching everything accepted")
	}
}

package controllers

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// A pod whose readiness flaps while its server keeps running comes back with
// the cache history the picker learned for it: its prompts go back to it.
// A sidecar's restart leaves the server's cache as it was. A restart of
// the server's container, a re-created pod or a new address means an empty
// cache: the pod comes back cold, and the prompt goes where a picker that
// never saw it would send it. Either way the request in flight across the
// flap counts on the server it runs on until it ends, once.
func TestAReadinessFlapKeepsThePodsCacheHistory(t *testing.T) {
	ports := []int32{8000}
	tests := map[string]struct {
		back      func(p *podWrapper) *podWrapper // the warm pod, Ready again
		wantWarm  bool
		wantCarry int64 // the request from before the flap, counted on the pod back
	}{
		"ready again": {
			back:      func(p *podWrapper) *podWrapper { return p },
			wantWarm:  true,
			wantCarry: 1,
		},
		"a sidecar restarted": {
			back:      func(p *podWrapper) *podWrapper { return p.restarted("istio-proxy", 1) },
			wantWarm:  true,
			wantCarry: 1,
		},
		"the server's container restarted": {
			back:      func(p *podWrapper) *podWrapper { return p.restarted("vllm", 1) },
			wantCarry: 1,
		},
		"re-created under its name": {
			back: func(p *podWrapper) *podWrapper { return p.uid("uid-new") },
		},
		"at a new address": {
			back: func(p *podWrapper) *podWrapper { return p.ip("127.0.0.9") },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			reg := registry.New()
			set := newPodSet(reg)
			ips := map[string]string{"a": "127.0.0.1", "b": "127.0.0.2"}
			for name, ip := range ips {
				pod := podAt(name, ip).ready().obj()
				set.sync(types.NamespacedName{Namespace: "ns", Name: name}, podEndpoints(ports, &pod))
			}
			pol := buildPolicy(t, reg)
			req := &policy.Request{Model: "m", Prompt: [][]byte{bytes.Repeat([]byte("a long shared document "), 800)}}

			// The warm pod is not where a picker that never saw the prompt
			// sends it: only the history explains the choice.
			warmName := "a"
			if pick(t, buildPolicy(t, reg), req, reg.Workers()).Endpoint().Name == "a" {
				warmName = "b"
			}
			key := types.NamespacedName{Namespace: "ns", Name: warmName}
			w := findWorker(t, reg, ips[warmName]+":8000")
			pol.Observe(req, w)
			if got := pick(t, pol, req, reg.Workers()); got != w {
				t.Fatalf("before the flap the prompt went to %s, want the pod that holds it, %s", got.Address(), w.Address())
			}
			guard := w.Admit()
			stale := reg.Workers()

			unready := podAt(warmName, ips[warmName]).condition(corev1.ConditionFalse).obj()
			set.sync(key, podEndpoints(ports, &unready))
			for _, ws := range [][]*registry.Worker{reg.Workers(), stale} {
				// A picker of its own: what it routes while the pod is
				// unready warms the other pod too, which would blur what
				// the history does once it is back.
				got, err := buildPolicy(t, reg).Pick(req, ws, 2)
				if err != nil || len(got) != 1 || got[0].Address() == w.Address() {
					t.Fatalf("Pick over %d candidates while the warm pod is unready = %v, %v; want the ready pod alone", len(ws), got, err)
				}
			}

			back := tc.back(podAt(warmName, ips[warmName])).ready().obj()
			set.sync(key, podEndpoints(ports, &back))
			cold := pick(t, buildPolicy(t, reg), req, reg.Workers())
			got := pick(t, pol, req, reg.Workers())
			bw := findWorker(t, reg, back.Status.PodIP+":8000")
			if tc.wantWarm && got != bw {
				t.Errorf("after the flap the prompt went to %s, want the warm pod back, %s", got.Address(), bw.Address())
			}
			if !tc.wantWarm && got != cold {
				t.Errorf("after the pod came back cold the prompt went to %s, want where a cold picker sends it, %s", got.Address(), cold.Address())
			}
			if n := bw.InFlight(); n != tc.wantCarry {
				t.Errorf("the pod back counts %d requests in flight, want %d", n, tc.wantCarry)
			}
			if _, ok := guard.Release(); !ok {
				t.Error("the request from before the flap was not released")
			}
			if _, ok := guard.Release(); ok {
				t.Error("the request from before the flap was released twice")
			}
			if n := bw.InFlight(); n != 0 {
				t.Errorf("after its request ended the pod back counts %d in flight, want 0", n)
			}
		})
	}
}

// podAt is a pod at ip, with no Ready condition yet, whose server declares
// port 8000 beside a mesh proxy.
func podAt(name, ip string) *podWrapper {
	return makePod(name).ip(ip).container("vllm", 8000).container("istio-proxy", 15090)
}

func buildPolicy(t *testing.T, reg *registry.Registry) policy.Policy {
	t.Helper()
	p, err := policy.Build(policy.Config{}, reg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pick(t *testing.T, p policy.Policy, req *policy.Request, ws []*registry.Worker) *registry.Worker {
	t.Helper()
	got, err := p.Pick(req, ws, 1)
	if err != nil {
		t.Fatal(err)
	}
	return got[0]
}

func findWorker(t *testing.T, reg *registry.Registry, addr string) *registry.Worker {
	t.Helper()
	for _, w := range reg.Workers() {
		if w.Address() == addr {
			return w
		}
	}
	t.Fatalf("no worker at %s", addr)
	return nil
}

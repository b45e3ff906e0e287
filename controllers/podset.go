package controllers

import (
	"context"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferpick/inferpick/picker/registry"
)

// request is what the pool and selector controllers reconcile: one pod of
// the served namespace, or (pod false) the whole set, which the pool
// controller keys on the pool itself.
//
// Per-pod requests are what keep the work of a pod event proportional to
// that pod: its endpoints alone are recomputed and handed to the sink.
// Only a change of the whole (the pool's selector or ports, the pool
// appearing) lists every pod.
type request struct {
	types.NamespacedName
	pod bool
}

func podRequest(o client.Object) request {
	return request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}, pod: true}
}

// podSet is the endpoints the sink holds, by pod: Ready ones, and the
// Unready ones of pods that run (whose workers the sink parks).
type podSet struct {
	sink EndpointSink
	pods map[types.NamespacedName][]registry.Endpoint
	// count is the number of Ready endpoints held.
	count int
	// contextLabel is the pods' context-length label read into their
	// endpoints; "" reads none.
	contextLabel string
	// labelKeys are the pod labels the policy's label filters read,
	// sorted; their values reach the endpoints' Labels.
	labelKeys []string
	// unparsed is, by pod, the value of its context-length label that did
	// not parse and was logged at the default verbosity.
	unparsed map[types.NamespacedName]string
}

// ready counts the endpoints of eps that are not Unready.
func ready(eps []registry.Endpoint) int {
	n := 0
	for i := range eps {
		if !eps[i].Unready {
			n++
		}
	}
	return n
}

func newPodSet(sink EndpointSink) podSet {
	return podSet{sink: sink, pods: map[types.NamespacedName][]registry.Endpoint{}, unparsed: map[types.NamespacedName]string{}}
}

// sync makes the sink hold eps for the pod key: none when the pod is gone,
// does not match or does not run. It reports whether anything changed;
// the endpoints of other pods are not looked at.
func (s *podSet) sync(key types.NamespacedName, eps []registry.Endpoint) bool {
	old := s.pods[key]
	if slices.Equal(old, eps) {
		return false
	}
	var stale []registry.Key
	for i := range old {
		k := old[i].Key
		if !slices.ContainsFunc(eps, func(e registry.Endpoint) bool { return e.Key == k }) {
			stale = append(stale, k)
		}
	}
	s.sink.Update(eps, stale)
	if len(eps) == 0 {
		delete(s.pods, key)
		delete(s.unparsed, key)
	} else {
		s.pods[key] = eps
	}
	s.count += ready(eps) - ready(old)
	return true
}

// reset makes the sink hold exactly the endpoints of pods on ports (all
// assumed to match the selector).
func (s *podSet) reset(ctx context.Context, ports []int32, pods []corev1.Pod) {
	clear(s.pods)
	s.count = 0
	all := make([]registry.Endpoint, 0, len(pods)*len(ports))
	for i := range pods {
		eps := s.withLabels(ctx, podEndpoints(ports, &pods[i]), &pods[i])
		if len(eps) == 0 {
			continue
		}
		s.pods[types.NamespacedName{Namespace: pods[i].Namespace, Name: pods[i].Name}] = eps
		s.count += ready(eps)
		all = append(all, eps...)
	}
	// A pod no longer held is logged afresh should it come back.
	maps.DeleteFunc(s.unparsed, func(k types.NamespacedName, _ string) bool { _, held := s.pods[k]; return !held })
	s.sink.Replace(all)
}

// clear empties the sink.
func (s *podSet) clear() {
	clear(s.pods)
	clear(s.unparsed)
	s.count = 0
	s.sink.Replace(nil)
}

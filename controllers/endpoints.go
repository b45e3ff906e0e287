package controllers

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// selectorOf turns the pool's matchLabels into a label selector. The API
// server cannot validate map keys, so an invalid key reaches us and is an
// error here rather than a selector that silently matches nothing.
func selectorOf(pool *inferencev1.InferencePool) (labels.Selector, error) {
	set := make(labels.Set, len(pool.Spec.Selector.MatchLabels))
	for k, v := range pool.Spec.Selector.MatchLabels {
		set[string(k)] = string(v)
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("selector of pool %s/%s has no labels", pool.Namespace, pool.Name)
	}
	sel, err := labels.ValidatedSelectorFromSet(set)
	if err != nil {
		return nil, fmt.Errorf("selector of pool %s/%s: %w", pool.Namespace, pool.Name, err)
	}
	return sel, nil
}

// portsOf returns the pool's target ports, in order.
func portsOf(pool *inferencev1.InferencePool) []int32 {
	ports := make([]int32, 0, len(pool.Spec.TargetPorts))
	for _, p := range pool.Spec.TargetPorts {
		ports = append(ports, int32(p.Number))
	}
	return ports
}

// readPodEndpoints reads the pod key from the cache, without copying it, and
// returns its endpoints: none when it is gone, does not match sel (nil
// matches every pod) or does not run (podEndpoints). Each carries the
// labels pods reads (podSet.withLabels).
func readPodEndpoints(ctx context.Context, reader client.Reader, key types.NamespacedName, sel labels.Selector, ports []int32, pods *podSet) ([]registry.Endpoint, error) {
	pod := &corev1.Pod{}
	if err := reader.Get(ctx, key, pod, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get pod %s: %w", key, err)
	}
	if sel != nil && !sel.Matches(labels.Set(pod.Labels)) {
		return nil, nil
	}
	return pods.withLabels(ctx, podEndpoints(ports, pod), pod), nil
}

// withLabels sets on eps, the endpoints of pod, the values of the labels
// the policy's label filters read (s.labelKeys, registry.LabelsOf) and the
// range of its context-length label (withContext).
func (s *podSet) withLabels(ctx context.Context, eps []registry.Endpoint, pod *corev1.Pod) []registry.Endpoint {
	if len(s.labelKeys) > 0 && len(eps) > 0 {
		l := registry.LabelsOf(s.labelKeys, pod.Labels)
		for i := range eps {
			eps[i].Labels = l
		}
	}
	return s.withContext(ctx, eps, pod)
}

// withContext sets on eps, the endpoints of pod, the prompt lengths the
// pod is meant for, as its label named s.contextLabel gives them ("min-max"
// tokens, registry.ParseContextRange); none when the label is empty or the
// pod has no such label. A value that does not parse is logged, naming the
// pod, once at the default verbosity (then at V(1) on each sync until it
// changes), and the pod counts as unlabelled: it takes prompts of any
// length.
func (s *podSet) withContext(ctx context.Context, eps []registry.Endpoint, pod *corev1.Pod) []registry.Endpoint {
	label := s.contextLabel
	if label == "" || len(eps) == 0 {
		return eps
	}
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	v, ok := pod.Labels[label]
	if !ok {
		delete(s.unparsed, key)
		return eps
	}
	r, err := registry.ParseContextRange(v)
	if err != nil {
		log := ctrl.LoggerFrom(ctx)
		if s.unparsed[key] == v {
			log = log.V(1)
		}
		s.unparsed[key] = v
		log.Info("Context-length label does not parse: the pod takes prompts of any length until it is fixed",
			"pod", klog.KObj(pod), "label", label, "error", err.Error())
		return eps
	}
	delete(s.unparsed, key)
	for i := range eps {
		eps[i].Context = r
	}
	return eps
}

// The pod annotations that list the target ports a pod serves, as
// comma-separated port numbers: llm-d's key, and the upstream endpoint
// picker's, which llm-d still reads. When a pod has both, llm-d's is read,
// as llm-d does.
const (
	activePortsAnnotation         = "llm-d.ai/active-ports"
	upstreamActivePortsAnnotation = "inference.networking.k8s.io/active-ports"
)

// activePorts returns the ports the pod's active-ports annotation lists,
// and false when it has none (every target port is served). Each entry is
// read as upstream and llm-d read it (fmt's %d: the number it starts with,
// so "8000 8001" is 8000); one that starts with no number is skipped, and
// an empty list serves no port.
func activePorts(pod *corev1.Pod) ([]int32, bool) {
	list, ok := pod.Annotations[activePortsAnnotation]
	if !ok {
		if list, ok = pod.Annotations[upstreamActivePortsAnnotation]; !ok {
			return nil, false
		}
	}
	var ports []int32
	for entry := range strings.SplitSeq(list, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(entry), "%d", &n); err == nil && n > 0 && n <= 65535 {
			ports = append(ports, int32(n))
		}
	}
	return ports, true
}

// podEndpoints returns the pod's endpoints, one per valid port it serves
// (all of ports, or those its active-ports annotation lists: activePorts),
// in the order of ports, each ranked by its place there whether the ports
// before it are served or not, and each serving its own metrics when ports
// are several (registry.Endpoint.OwnMetrics); none when the pod is gone or
// its IP does not parse. A pod that runs but is not Ready has its
// endpoints Unready: the workers they had are parked, not removed, so that
// a readiness flap keeps what the picker learned of the server. The pod is
// assumed to match the selector.
func podEndpoints(ports []int32, pod *corev1.Pod) []registry.Endpoint {
	if !podRuns(pod) {
		return nil
	}
	addr, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return nil
	}
	unready := !podReady(pod)
	role := podRole(pod)
	active, listed := activePorts(pod)
	eps := make([]registry.Endpoint, 0, len(ports))
	for rank, n := range ports {
		if n < 1 || n > 65535 || listed && !slices.Contains(active, n) {
			continue
		}
		eps = append(eps, registry.Endpoint{
			Key:        registry.Key{UID: string(pod.UID), Port: n},
			Namespace:  pod.Namespace,
			Name:       pod.Name,
			Address:    netip.AddrPortFrom(addr.Unmap(), uint16(n)),
			Rank:       rank,
			Restarts:   podRestarts(pod, n),
			OwnMetrics: len(ports) > 1,
			Role:       role,
			Unready:    unready,
		})
	}
	return eps
}

// podRole is the stages of a request the pod serves, as its llm-d.ai/role
// label says (registry.ParseRole).
func podRole(pod *corev1.Pod) registry.Role {
	v, ok := pod.Labels[policy.RoleLabel]
	return registry.ParseRole(v, ok)
}

// podRuns reports whether a pod's server may be running, ready or not: it
// has an IP, it has not terminated, and it is not being deleted (a
// terminating pod is gone at once).
func podRuns(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.PodIP != "" &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// podReady reports whether a pod's Ready condition is true.
func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podRestarts is how many times the containers that serve port have
// restarted, all together; each count only grows, so the sum changes
// whenever one of them restarts. The containers that serve port are those
// that declare it (a containerPort), so that a sidecar's restart (a mesh
// proxy, a logging agent) is not taken for the server's. A port no
// container declares may be served by any of them: every container counts.
// A native sidecar (an init container restarted Always) counts only when
// it declares port, and then with every container, as it may be a proxy
// in front of the server (llm-d's routing sidecar).
func podRestarts(pod *corev1.Pod, port int32) int32 {
	n, declared := int32(0), false
	for i := range pod.Spec.Containers {
		if c := &pod.Spec.Containers[i]; declares(c, port) {
			n, declared = n+restartsOf(pod.Status.ContainerStatuses, c.Name), true
		}
	}
	if declared {
		return n
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; isSidecar(c) && declares(c, port) {
			n += restartsOf(pod.Status.InitContainerStatuses, c.Name)
		}
	}
	for i := range pod.Status.ContainerStatuses {
		n += pod.Status.ContainerStatuses[i].RestartCount
	}
	return n
}

// declares reports whether c declares port as a container port.
func declares(c *corev1.Container, port int32) bool {
	for _, p := range c.Ports {
		if p.ContainerPort == port {
			return true
		}
	}
	return false
}

// isSidecar reports whether the init container c is a native sidecar, one
// that runs beside the pod's containers.
func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// restartsOf returns the restart count of the container named name in
// statuses, 0 before it has one.
func restartsOf(statuses []corev1.ContainerStatus, name string) int32 {
	for i := range statuses {
		if statuses[i].Name == name {
			return statuses[i].RestartCount
		}
	}
	return 0
}

package controllers

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestTrimPodKeepsWhatTheControllersRead checks that a trimmed pod gives
// the controllers the same answers as the full one, and keeps of its spec
// only the ports its containers and native sidecars declare, and of its
// annotations only those that list its active ports.
func TestTrimPodKeepsWhatTheControllersRead(t *testing.T) {
	const activeGIE, activeLLMD = "inference.networking.k8s.io/active-ports", "llm-d.ai/active-ports"
	full := func(p *podWrapper) *corev1.Pod {
		o := p.obj()
		o.Annotations = map[string]string{"big": "annotation", activeLLMD: "8000, 8002", activeGIE: "8001"}
		o.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		always := corev1.ContainerRestartPolicyAlways
		o.Spec.Containers = []corev1.Container{
			{Name: "vllm", Image: "vllm/vllm-openai", Args: []string{"--model", "m"}, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000, Protocol: corev1.ProtocolTCP}}},
			{Name: "logger", Image: "fluent-bit"},
		}
		o.Spec.InitContainers = []corev1.Container{
			{Name: "setup", Image: "busybox", Ports: []corev1.ContainerPort{{ContainerPort: 8001}}},
			{Name: "routing-proxy", Image: "llm-d-routing-sidecar", RestartPolicy: &always, Ports: []corev1.ContainerPort{{ContainerPort: 8001}}},
			{Name: "istio-proxy", Image: "istio/proxyv2", RestartPolicy: &always},
		}
		o.Status.Conditions = append([]corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}, o.Status.Conditions...)
		o.Status.ContainerStatuses = []corev1.ContainerStatus{
			{Name: "vllm", Ready: true, RestartCount: 2, Image: "vllm/vllm-openai"},
			{Name: "logger", Ready: true, RestartCount: 5, Image: "fluent-bit"},
		}
		o.Status.InitContainerStatuses = []corev1.ContainerStatus{
			{Name: "setup", RestartCount: 1, Image: "busybox"},
			{Name: "routing-proxy", Ready: true, RestartCount: 3, Image: "llm-d-routing-sidecar"},
			{Name: "istio-proxy", Ready: true, RestartCount: 4, Image: "istio/proxyv2"},
		}
		return &o
	}
	sel := labels.SelectorFromSet(labels.Set{"app": "vllm"})
	pods := map[string]*corev1.Pod{
		"ready":       full(makePod("a").ready().ip("10.0.0.1")),
		"not ready":   full(makePod("b").condition(corev1.ConditionFalse).ip("10.0.0.2")),
		"no IP":       full(makePod("c").ready()),
		"terminating": full(makePod("d").ready().ip("10.0.0.4").terminating()),
		"other label": full(makePod("e").ready().ip("10.0.0.5")),
		"failed":      full(makePod("f").condition(corev1.ConditionFalse).ip("10.0.0.6")),
	}
	pods["other label"].Labels = map[string]string{"app": "other"}
	pods["failed"].Status.Phase = corev1.PodFailed
	bare := makePod("g").ready().ip("10.0.0.7").obj()
	if got, err := trimPod(&bare); err != nil || got.(*corev1.Pod).Annotations != nil {
		t.Errorf("trimPod(a pod without annotations) = %+v, %v; want no annotations", got, err)
	}
	for name, pod := range pods {
		t.Run(name, func(t *testing.T) {
			got, err := trimPod(pod)
			if err != nil {
				t.Fatal(err)
			}
			trimmed := got.(*corev1.Pod)
			ports := []int32{8000, 8001, 8002}
			if diff := cmp.Diff(podEndpoints(ports, pod), podEndpoints(ports, trimmed), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("endpoints (-full +trimmed):\n%s", diff)
			}
			if a, b := sel.Matches(labels.Set(pod.Labels)), sel.Matches(labels.Set(trimmed.Labels)); a != b {
				t.Errorf("selector matches full %v, trimmed %v", a, b)
			}
			if trimmed.ManagedFields != nil {
				t.Errorf("trimmed pod keeps what no controller reads: %+v", trimmed)
			}
			wantAnnotations := map[string]string{activeLLMD: "8000, 8002", activeGIE: "8001"}
			if diff := cmp.Diff(wantAnnotations, trimmed.Annotations); diff != "" {
				t.Errorf("trimmed annotations, want the active-ports ones alone (-want +got):\n%s", diff)
			}
			always := corev1.ContainerRestartPolicyAlways
			wantSpec := corev1.PodSpec{
				Containers:     []corev1.Container{{Name: "vllm", Ports: []corev1.ContainerPort{{ContainerPort: 8000}}}},
				InitContainers: []corev1.Container{{Name: "routing-proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{ContainerPort: 8001}}}},
			}
			if diff := cmp.Diff(wantSpec, trimmed.Spec); diff != "" {
				t.Errorf("trimmed spec, want the declared ports alone (-want +got):\n%s", diff)
			}
			wantStatuses := []corev1.ContainerStatus{{Name: "vllm", RestartCount: 2}, {Name: "logger", RestartCount: 5}}
			if diff := cmp.Diff(wantStatuses, trimmed.Status.ContainerStatuses); diff != "" {
				t.Errorf("trimmed container statuses, want the restart counts alone (-want +got):\n%s", diff)
			}
			wantInit := []corev1.ContainerStatus{{Name: "routing-proxy", RestartCount: 3}}
			if diff := cmp.Diff(wantInit, trimmed.Status.InitContainerStatuses); diff != "" {
				t.Errorf("trimmed init container statuses, want the restart counts of the sidecars that declare ports alone (-want +got):\n%s", diff)
			}
		})
	}
	if got, err := trimPod("tombstone"); err != nil || got != "tombstone" {
		t.Errorf("trimPod(non-pod) = %v, %v; want it passed through", got, err)
	}
}

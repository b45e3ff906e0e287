package controllers

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
)

// podWrapper builds Pods for tests: makePod("a").uid("u").ready().ip(...).obj().
type podWrapper struct{ corev1.Pod }

func makePod(name string) *podWrapper {
	return &podWrapper{corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
		Labels: map[string]string{"app": "vllm"},
	}}}
}

func (p *podWrapper) uid(uid string) *podWrapper { p.UID = types.UID(uid); return p }

func (p *podWrapper) ip(ip string) *podWrapper { p.Status.PodIP = ip; return p }

func (p *podWrapper) annotate(key, value string) *podWrapper {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[key] = value
	return p
}

func (p *podWrapper) condition(s corev1.ConditionStatus) *podWrapper {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: s})
	return p
}

func (p *podWrapper) ready() *podWrapper { return p.condition(corev1.ConditionTrue) }

func (p *podWrapper) terminating() *podWrapper {
	p.DeletionTimestamp = &metav1.Time{}
	p.Finalizers = []string{"example.com/hold"}
	return p
}

func (p *podWrapper) obj() corev1.Pod { return *p.DeepCopy() }

// poolWrapper builds InferencePools for tests.
type poolWrapper struct{ inferencev1.InferencePool }

func makePool(name string, ports ...int32) *poolWrapper {
	p := &poolWrapper{inferencev1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: inferencev1.InferencePoolSpec{
			Selector: inferencev1.LabelSelector{MatchLabels: map[inferencev1.LabelKey]inferencev1.LabelValue{"app": "vllm"}},
		},
	}}
	for _, n := range ports {
		p.Spec.TargetPorts = append(p.Spec.TargetPorts, inferencev1.Port{Number: inferencev1.PortNumber(n)})
	}
	return p
}

func (p *poolWrapper) selector(kv map[string]string) *poolWrapper {
	p.Spec.Selector.MatchLabels = map[inferencev1.LabelKey]inferencev1.LabelValue{}
	for k, v := range kv {
		p.Spec.Selector.MatchLabels[inferencev1.LabelKey(k)] = inferencev1.LabelValue(v)
	}
	return p
}

func (p *poolWrapper) obj() *inferencev1.InferencePool { return p.DeepCopy() }

// restarts gives the pod one container that has restarted n times.
func (p *podWrapper) restarts(n int32) *podWrapper {
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "vllm", RestartCount: n}}
	return p
}

// container adds a container declaring ports to the pod's spec, and its
// status.
func (p *podWrapper) container(name string, ports ...int32) *podWrapper {
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Ports: containerPorts(ports)})
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: name})
	return p
}

// sidecar adds a native sidecar (an init container restarted Always)
// declaring ports to the pod's spec, and its status.
func (p *podWrapper) sidecar(name string, ports ...int32) *podWrapper {
	always := corev1.ContainerRestartPolicyAlways
	p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name, RestartPolicy: &always, Ports: containerPorts(ports)})
	p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: name})
	return p
}

// restarted sets the restart count of the named container, a sidecar or not.
func (p *podWrapper) restarted(name string, n int32) *podWrapper {
	for _, statuses := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for i := range statuses {
			if statuses[i].Name == name {
				statuses[i].RestartCount = n
			}
		}
	}
	return p
}

func containerPorts(ports []int32) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for _, n := range ports {
		out = append(out, corev1.ContainerPort{ContainerPort: n, Protocol: corev1.ProtocolTCP})
	}
	return out
}

package framework

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
)

// PoolWrapper builds InferencePools: MakePool("ns", "pool").Ports(8000).Obj().
type PoolWrapper struct{ inferencev1.InferencePool }

// MakePool returns a pool selecting app=vllm with no target ports yet.
func MakePool(namespace, name string) *PoolWrapper {
	return &PoolWrapper{inferencev1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: inferencev1.InferencePoolSpec{
			Selector: inferencev1.LabelSelector{
				MatchLabels: map[inferencev1.LabelKey]inferencev1.LabelValue{"app": "vllm"},
			},
		},
	}}
}

// Ports sets the target ports.
func (p *PoolWrapper) Ports(ports ...int32) *PoolWrapper {
	p.Spec.TargetPorts = nil
	for _, n := range ports {
		p.Spec.TargetPorts = append(p.Spec.TargetPorts, inferencev1.Port{Number: inferencev1.PortNumber(n)})
	}
	return p
}

// Selector replaces the selector's labels.
func (p *PoolWrapper) Selector(kv map[string]string) *PoolWrapper {
	p.Spec.Selector.MatchLabels = map[inferencev1.LabelKey]inferencev1.LabelValue{}
	for k, v := range kv {
		p.Spec.Selector.MatchLabels[inferencev1.LabelKey(k)] = inferencev1.LabelValue(v)
	}
	return p
}

// Picker sets an endpointPickerRef to a Service and port.
func (p *PoolWrapper) Picker(name string, port int32) *PoolWrapper {
	p.Spec.EndpointPickerRef = &inferencev1.EndpointPickerRef{
		Name: inferencev1.ObjectName(name),
		Port: &inferencev1.Port{Number: inferencev1.PortNumber(port)},
	}
	return p
}

// AppProtocol sets the protocol of the target ports, such as
// inferencev1.AppProtocolH2C for gRPC model servers.
func (p *PoolWrapper) AppProtocol(proto inferencev1.AppProtocol) *PoolWrapper {
	p.Spec.AppProtocol = proto
	return p
}

// H2C makes the pool's target ports speak HTTP/2 cleartext, as a pool of
// gRPC model servers does (the upstream chart's modelServerProtocol grpc).
func (p *PoolWrapper) H2C() *PoolWrapper { return p.AppProtocol(inferencev1.AppProtocolH2C) }

// Obj returns a copy of the pool.
func (p *PoolWrapper) Obj() *inferencev1.InferencePool { return p.DeepCopy() }

// PodWrapper builds Pods as a scheduler would leave them: bound to a node,
// with no status. Status comes from SetReady/SetNotReady, as from a kubelet.
type PodWrapper struct{ corev1.Pod }

// MakePod returns a pod labelled app=vllm, bound to node "node-1".
func MakePod(namespace, name string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": "vllm"}},
		Spec: corev1.PodSpec{
			NodeName:                      "node-1",
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}},
		},
	}}
}

// Labels replaces the pod's labels.
func (p *PodWrapper) Labels(kv map[string]string) *PodWrapper { p.ObjectMeta.Labels = kv; return p }

// Label sets one label.
func (p *PodWrapper) Label(k, v string) *PodWrapper {
	if p.ObjectMeta.Labels == nil {
		p.ObjectMeta.Labels = map[string]string{}
	}
	p.ObjectMeta.Labels[k] = v
	return p
}

// Image sets the container's image.
func (p *PodWrapper) Image(image string) *PodWrapper { p.Spec.Containers[0].Image = image; return p }

// Node binds the pod to node.
func (p *PodWrapper) Node(node string) *PodWrapper { p.Spec.NodeName = node; return p }

// Obj returns a copy of the pod.
func (p *PodWrapper) Obj() *corev1.Pod { return p.DeepCopy() }

// SetReady gives pod the status a kubelet reports for a running, ready
// container at ip.
func SetReady(pod *corev1.Pod, ip string) {
	setStatus(pod, ip, corev1.ConditionTrue)
}

// SetNotReady gives pod the status of a running container failing its
// readiness probe at ip.
func SetNotReady(pod *corev1.Pod, ip string) {
	setStatus(pod, ip, corev1.ConditionFalse)
}

// PodReady reports whether pod's Ready condition is true.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func setStatus(pod *corev1.Pod, ip string, ready corev1.ConditionStatus) {
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.HostIP = "127.0.0.1"
	pod.Status.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	pod.Status.StartTime = &now
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: ready, LastTransitionTime: now},
	}
	pod.Status.ContainerStatuses = nil
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: ready == corev1.ConditionTrue, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
}

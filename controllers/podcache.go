package controllers

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// trimPod is the cache transform of pods: it keeps what the controllers
// read (identity, labels, the active-ports annotations: activePorts,
// deletion, phase, IP, the Ready condition, each container's restart
// count, the port numbers its containers and native sidecars declare, and
// those sidecars' restart counts: podRestarts) and drops the rest (the
// rest of the spec, the other annotations, owner references, managed
// fields, the rest of the container statuses), so that a cached
// pod costs a few hundred bytes, not several kilobytes, in a pool of
// thousands.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone: passed as is
	}
	out := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			Generation:        pod.Generation,
			Labels:            pod.Labels,
			Annotations:       activePortsAnnotations(pod.Annotations),
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase, PodIP: pod.Status.PodIP},
	}
	for i := range pod.Spec.Containers {
		if c := &pod.Spec.Containers[i]; len(c.Ports) > 0 {
			out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Ports: portNumbers(c.Ports)})
		}
	}
	for i := range pod.Status.ContainerStatuses {
		c := &pod.Status.ContainerStatuses[i]
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, RestartCount: c.RestartCount})
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if !isSidecar(c) || len(c.Ports) == 0 {
			continue
		}
		out.Spec.InitContainers = append(out.Spec.InitContainers, corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy, Ports: portNumbers(c.Ports)})
		out.Status.InitContainerStatuses = append(out.Status.InitContainerStatuses, corev1.ContainerStatus{Name: c.Name, RestartCount: restartsOf(pod.Status.InitContainerStatuses, c.Name)})
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
			break
		}
	}
	return out, nil
}

// activePortsAnnotations returns the active-ports annotations of all, nil
// when it has none.
func activePortsAnnotations(all map[string]string) map[string]string {
	var out map[string]string
	for _, k := range [...]string{activePortsAnnotation, upstreamActivePortsAnnotation} {
		if v, ok := all[k]; ok {
			if out == nil {
				out = make(map[string]string, 2)
			}
			out[k] = v
		}
	}
	return out
}

// portNumbers returns ports with their numbers alone.
func portNumbers(ports []corev1.ContainerPort) []corev1.ContainerPort {
	out := make([]corev1.ContainerPort, len(ports))
	for i := range ports {
		out[i].ContainerPort = ports[i].ContainerPort
	}
	return out
}

var _ toolscache.TransformFunc = trimPod

package controllers

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// trimPod is the cache transform of pods: it keeps what the controllers
// read (identity, labels, deletion, phase, IP, the Ready condition, each
// container's restart count) and drops the rest (spec, annotations, owner
// references, managed fields, the rest of the container statuses), so that
// a cached pod costs a few hundred bytes, not several kilobytes, in a pool
// of thousands.
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
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase, PodIP: pod.Status.PodIP},
	}
	for i := range pod.Status.ContainerStatuses {
		c := &pod.Status.ContainerStatuses[i]
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, RestartCount: c.RestartCount})
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
			break
		}
	}
	return out, nil
}

var _ toolscache.TransformFunc = trimPod

package app

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The kustomize install (kubectl apply -k config/default) records the
// Events about a missing pool or CRD on the picker's own Pod, as the
// chart's does: its Deployment hands the picker its Pod's name, UID and
// namespace through the downward API.
func TestKustomizeDeploymentNamesThePickersPod(t *testing.T) {
	raw, err := os.ReadFile("../../../config/manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var dep *appsv1.Deployment
	for doc := range strings.SplitSeq(string(raw), "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict([]byte(doc), &d); err == nil && d.Kind == "Deployment" {
			dep = &d
		}
	}
	if dep == nil {
		t.Fatal("no Deployment in config/manager/manager.yaml")
	}

	// What the kubelet gives the container of this Pod.
	pod := metav1.ObjectMeta{Name: "inferpick-5d8f7c9b6-x2x7q", Namespace: "serving", UID: "0b7d3c1e-uid"}
	fields := map[string]string{"metadata.name": pod.Name, "metadata.namespace": pod.Namespace, "metadata.uid": string(pod.UID)}
	for _, name := range []string{"POD_NAME", "POD_UID", "NAMESPACE"} {
		t.Setenv(name, "")
	}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			continue
		}
		v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
		if !ok {
			t.Fatalf("env %s: field %s is not one of this test's", e.Name, e.ValueFrom.FieldRef.FieldPath)
		}
		t.Setenv(e.Name, v)
	}

	want := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	if diff := cmp.Diff(want, selfPod()); diff != "" {
		t.Errorf("the picker's own Pod, from the kustomize Deployment's env (-want +got):\n%s", diff)
	}
}

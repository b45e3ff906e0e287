package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	"github.com/inferpick/inferpick/controllers"
)

// Names of the objects the demo creates.
const (
	namespace  = "demo"
	poolName   = "vllm"
	appLabel   = "vllm"
	pickerName = "inferpick"
)

// cluster is a real kube-apiserver and etcd with the InferencePool CRD.
type cluster struct {
	env        *envtest.Environment
	client     client.Client
	kubeconfig string
}

// startCluster starts the control plane from c.ControlPlaneDir and writes a
// kubeconfig for it into c.WorkDir.
func startCluster(c config) (*cluster, error) {
	scheme, err := controllers.NewScheme()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    c.ControlPlaneDir,
		CRDDirectoryPaths:        []string{c.CRDDir},
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		ControlPlaneStartTimeout: c.StartDeadline,
		ControlPlaneStopTimeout:  20 * time.Second,
	}
	if shimsSupported {
		paths, err := prepareShims(filepath.Join(c.WorkDir, "shim"), c.ControlPlaneDir)
		if err != nil {
			return nil, err
		}
		env.ControlPlane.Etcd = &envtest.Etcd{Path: paths["etcd"]}
		env.ControlPlane.GetAPIServer().Path = paths["kube-apiserver"]
		env.ControlPlane.KubectlPath = filepath.Join(c.ControlPlaneDir, "kubectl")
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("start control plane from %s: %w", c.ControlPlaneDir, err)
	}
	cl := &cluster{env: env, kubeconfig: filepath.Join(c.WorkDir, "kubeconfig")}
	if cl.client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, cl.stopAfter(fmt.Errorf("client: %w", err))
	}
	if err := os.WriteFile(cl.kubeconfig, env.KubeConfig, 0o600); err != nil {
		return nil, cl.stopAfter(fmt.Errorf("write kubeconfig: %w", err))
	}
	return cl, nil
}

func (cl *cluster) stopAfter(err error) error {
	if stopErr := cl.stop(); stopErr != nil {
		return fmt.Errorf("%w (and %w)", err, stopErr)
	}
	return err
}

// stop stops the API server and etcd and removes their data.
func (cl *cluster) stop() error {
	if err := cl.env.Stop(); err != nil {
		return fmt.Errorf("stop control plane: %w", err)
	}
	return nil
}

// createPool creates the namespace and an InferencePool selecting
// app=vllm on port, whose endpoint picker is the inferpick Service.
func (cl *cluster) createPool(ctx context.Context, port, pickerPort int) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := cl.client.Create(ctx, ns); err != nil {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	pool := &inferencev1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: poolName},
		Spec: inferencev1.InferencePoolSpec{
			Selector: inferencev1.LabelSelector{
				MatchLabels: map[inferencev1.LabelKey]inferencev1.LabelValue{"app": appLabel},
			},
			TargetPorts: []inferencev1.Port{{Number: inferencev1.PortNumber(port)}},
			EndpointPickerRef: &inferencev1.EndpointPickerRef{
				Name: pickerName,
				Port: &inferencev1.Port{Number: inferencev1.PortNumber(pickerPort)},
			},
		},
	}
	if err := cl.client.Create(ctx, pool); err != nil {
		return fmt.Errorf("create InferencePool %s: %w", poolName, err)
	}
	return nil
}

// createPods creates one model-server Pod per address and then reports it
// running and Ready at that address through the status subresource, which
// is what a kubelet does once the container's readiness probe passes.
func (cl *cluster) createPods(ctx context.Context, ips []netip.Addr) ([]string, error) {
	names := make([]string, 0, len(ips))
	for i, ip := range ips {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: namespace,
				Name:      fmt.Sprintf("vllm-%d", i),
				Labels:    map[string]string{"app": appLabel},
			},
			Spec: corev1.PodSpec{
				NodeName:   "demo-node",
				Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:demo"}},
			},
		}
		if err := cl.client.Create(ctx, pod); err != nil {
			return nil, fmt.Errorf("create pod %s: %w", pod.Name, err)
		}
		setReady(pod, ip)
		if err := cl.client.Status().Update(ctx, pod); err != nil {
			return nil, fmt.Errorf("set status of pod %s: %w", pod.Name, err)
		}
		names = append(names, pod.Name)
	}
	return names, nil
}

// setReady gives pod the status of a running, ready container at ip.
func setReady(pod *corev1.Pod, ip netip.Addr) {
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:     ip.String(),
		PodIPs:    []corev1.PodIP{{IP: ip.String()}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "vllm", Image: "vllm/vllm-openai:demo", Ready: true, Started: ptrTo(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
}

func ptrTo[T any](v T) *T { return &v }

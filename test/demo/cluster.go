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

	"github.com/inferpick/inferpick/test/framework"
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
	cp         *framework.ControlPlane
	client     client.Client
	kubeconfig string
}

// startCluster starts the control plane from c.ControlPlaneDir and writes a
// kubeconfig for it into c.WorkDir. Nothing keeps running when it fails.
func startCluster(c config) (*cluster, error) {
	o := framework.ControlPlaneOptions{
		AssetsDir:    c.ControlPlaneDir,
		CRDPaths:     []string{c.CRDDir},
		Dir:          c.WorkDir,
		StartTimeout: c.StartDeadline,
		StopTimeout:  20 * time.Second,
	}
	if shimsSupported {
		paths, err := prepareShims(filepath.Join(c.WorkDir, "shim"), c.ControlPlaneDir)
		if err != nil {
			return nil, err
		}
		o.Configure = func(env *envtest.Environment) {
			env.ControlPlane.Etcd = &envtest.Etcd{Path: paths["etcd"]}
			env.ControlPlane.GetAPIServer().Path = paths["kube-apiserver"]
			env.ControlPlane.KubectlPath = filepath.Join(c.ControlPlaneDir, "kubectl")
		}
	}
	cp, err := framework.StartControlPlane(o)
	if err != nil {
		return nil, err
	}
	cl := &cluster{cp: cp, client: cp.Client, kubeconfig: filepath.Join(c.WorkDir, "kubeconfig")}
	if err := os.WriteFile(cl.kubeconfig, cp.Env.KubeConfig, 0o600); err != nil {
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
func (cl *cluster) stop() error { return cl.cp.Stop() }

// createPool creates the namespace and an InferencePool selecting
// app=vllm on port, whose endpoint picker is the inferpick Service.
func (cl *cluster) createPool(ctx context.Context, port, pickerPort int) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := cl.client.Create(ctx, ns); err != nil {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	pool := framework.MakePool(namespace, poolName).
		Selector(map[string]string{"app": appLabel}).
		Ports(int32(port)).
		Picker(pickerName, int32(pickerPort)).
		Obj()
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
		pod := framework.MakePod(namespace, fmt.Sprintf("vllm-%d", i)).
			Labels(map[string]string{"app": appLabel}).
			Node("demo-node").
			Image("vllm/vllm-openai:demo").
			Obj()
		if err := cl.client.Create(ctx, pod); err != nil {
			return nil, fmt.Errorf("create pod %s: %w", pod.Name, err)
		}
		framework.SetReady(pod, ip.String())
		if err := cl.client.Status().Update(ctx, pod); err != nil {
			return nil, fmt.Errorf("set status of pod %s: %w", pod.Name, err)
		}
		names = append(names, pod.Name)
	}
	return names, nil
}

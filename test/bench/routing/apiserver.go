package routing

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	"github.com/inferpick/inferpick/controllers"
)

// APIServer is a real API server (envtest, from hack/controlplane.sh)
// with the project's CRDs, a client and a kubeconfig file for the pickers.
// It is started from the repository's root.
type APIServer struct {
	env *envtest.Environment
	// C is a client of the API server; Kubeconfig a file naming it, for
	// the pickers.
	C          client.Client
	Kubeconfig string
	dir        string
}

// StartAPIServer starts an API server and etcd with the project's CRDs.
func StartAPIServer(ctx context.Context) (*APIServer, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		out, err := exec.CommandContext(ctx, "hack/controlplane.sh").Output()
		if err != nil {
			return nil, fmt.Errorf("hack/controlplane.sh: %w", err)
		}
		os.Setenv("KUBEBUILDER_ASSETS", strings.TrimSpace(string(out)))
	}
	ctrllog.SetLogger(logr.Discard())
	scheme, err := controllers.NewScheme()
	if err != nil {
		return nil, err
	}
	bc := &APIServer{env: &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}}
	cfg, err := bc.env.Start()
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			bc.Stop()
		}
	}()
	cfg.QPS, cfg.Burst = 5000, 10000
	if bc.C, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	user, err := bc.env.AddUser(envtest.User{Name: "inferpick", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	if bc.dir, err = os.MkdirTemp("", "inferpick-bench-cluster-"); err != nil {
		return nil, err
	}
	bc.Kubeconfig = filepath.Join(bc.dir, "kubeconfig")
	if err := os.WriteFile(bc.Kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	ok = true
	return bc, nil
}

// Stop ends the API server and etcd.
func (bc *APIServer) Stop() {
	_ = bc.env.Stop()
	if bc.dir != "" {
		_ = os.RemoveAll(bc.dir)
	}
}

// Pool creates a namespace named after prefix and, in it, InferencePool
// "pool" over the pods labelled app=vllm on port. It returns the
// namespace.
func (bc *APIServer) Pool(ctx context.Context, prefix string, port int32) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := bc.C.Create(ctx, ns); err != nil {
		return "", err
	}
	pool := &inferencev1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "pool"},
		Spec: inferencev1.InferencePoolSpec{
			Selector:    inferencev1.LabelSelector{MatchLabels: map[inferencev1.LabelKey]inferencev1.LabelValue{"app": "vllm"}},
			TargetPorts: []inferencev1.Port{{Number: inferencev1.PortNumber(port)}},
			EndpointPickerRef: &inferencev1.EndpointPickerRef{
				Name: "picker", Port: &inferencev1.Port{Number: 9002},
			},
		},
	}
	if err := bc.C.Create(ctx, pool); err != nil {
		return "", fmt.Errorf("create pool: %w", err)
	}
	return ns.Name, nil
}

// ReadyPod creates pod name of ns, labelled app=vllm, and reports it Ready
// at ip through the status subresource, as a kubelet would.
func (bc *APIServer) ReadyPod(ctx context.Context, ns, name, ip string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "vllm"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}},
	}
	if err := bc.C.Create(ctx, pod); err != nil {
		return fmt.Errorf("create pod %s: %w", name, err)
	}
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	if err := bc.C.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("pod %s ready: %w", name, err)
	}
	return nil
}

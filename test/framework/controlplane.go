package framework

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/inferpick/inferpick/controllers"
)

// AssetsEnv names the directory of etcd, kube-apiserver and kubectl;
// hack/controlplane.sh builds them and prints it, and the Makefile's
// cluster targets set it.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// ControlPlaneOptions change how StartControlPlane starts etcd and
// kube-apiserver. The zero value is what most suites want.
type ControlPlaneOptions struct {
	// AssetsDir holds the binaries; $KUBEBUILDER_ASSETS when empty.
	AssetsDir string
	// CRDPaths are installed at start; the project's config/crd/bases when
	// nil.
	CRDPaths []string
	// Scheme is the client's; the controllers' scheme when nil.
	Scheme *runtime.Scheme
	// Dir receives the kubeconfig files (and the serving certificate with
	// StableCerts); a temporary directory removed by Stop when empty.
	Dir string
	// StableCerts keeps the API server's serving certificate in Dir, so
	// that kubeconfigs stay valid over an API server restart.
	StableCerts bool
	// StartTimeout and StopTimeout bound each step; envtest's defaults
	// when zero.
	StartTimeout, StopTimeout time.Duration
	// Configure changes the environment before it starts.
	Configure func(*envtest.Environment)
}

// ControlPlane is a running etcd and kube-apiserver with the CRDs
// installed, an admin client, and a kubeconfig file for child processes.
type ControlPlane struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	// Kubeconfig is a kubeconfig file for a user in system:masters.
	Kubeconfig string
	dir        string
	removeDir  bool
}

// StartControlPlane starts a control plane. On every error path what was
// already started is stopped again.
func StartControlPlane(o ControlPlaneOptions) (_ *ControlPlane, err error) {
	if o.AssetsDir == "" {
		o.AssetsDir = os.Getenv(AssetsEnv)
	}
	if o.AssetsDir == "" {
		return nil, errors.New(AssetsEnv + " is not set: use the Makefile's test targets, " +
			"or set it to the directory printed by hack/controlplane.sh")
	}
	if o.CRDPaths == nil {
		o.CRDPaths = []string{filepath.Join(RepoRoot(), "config", "crd", "bases")}
	}
	if o.Scheme == nil {
		if o.Scheme, err = controllers.NewScheme(); err != nil {
			return nil, err
		}
	}
	c := &ControlPlane{dir: o.Dir}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "inferpick-controlplane-"); err != nil {
			return nil, err
		}
		c.removeDir = true
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
		}
	}()
	c.Env = &envtest.Environment{
		BinaryAssetsDirectory:    o.AssetsDir,
		CRDDirectoryPaths:        o.CRDPaths,
		ErrorIfCRDPathMissing:    true,
		Scheme:                   o.Scheme,
		ControlPlaneStartTimeout: o.StartTimeout,
		ControlPlaneStopTimeout:  o.StopTimeout,
	}
	if o.StableCerts {
		certs := filepath.Join(c.dir, "apiserver")
		if err := os.MkdirAll(certs, 0o700); err != nil {
			return nil, err
		}
		c.Env.ControlPlane.GetAPIServer().CertDir = certs
	}
	if o.Configure != nil {
		o.Configure(c.Env)
	}
	if c.Config, err = c.Env.Start(); err != nil {
		return nil, fmt.Errorf("start control plane from %s: %w", o.AssetsDir, err)
	}
	if c.Client, err = client.New(c.Config, client.Options{Scheme: o.Scheme}); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if c.Kubeconfig, err = c.AddUser("admin", "system:masters"); err != nil {
		return nil, err
	}
	return c, nil
}

// StartControlPlaneT starts a control plane for the test and stops it in
// the test's cleanup. It skips the test when KUBEBUILDER_ASSETS is not set
// and o names no directory.
func StartControlPlaneT(t testing.TB, o ControlPlaneOptions) *ControlPlane {
	t.Helper()
	if o.AssetsDir == "" {
		SkipWithoutAssets(t)
	}
	c, err := StartControlPlane(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// SkipWithoutAssets skips the test when KUBEBUILDER_ASSETS is not set.
func SkipWithoutAssets(t testing.TB) {
	t.Helper()
	if os.Getenv(AssetsEnv) == "" {
		t.Skip(AssetsEnv + " is not set: run the suite through its make target (it points at hack/controlplane.sh's directory)")
	}
}

// AddUser writes a kubeconfig file for a user in groups and returns its
// path.
func (c *ControlPlane) AddUser(name string, groups ...string) (string, error) {
	user, err := c.Env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return "", fmt.Errorf("add user %s: %w", name, err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig of %s: %w", name, err)
	}
	path := filepath.Join(c.dir, name+".kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// Stop stops the API server and etcd and removes the files StartControlPlane
// made. It is safe to call more than once.
func (c *ControlPlane) Stop() error {
	var err error
	if c.Env != nil {
		if stopErr := c.Env.Stop(); stopErr != nil {
			err = fmt.Errorf("stop control plane: %w", stopErr)
		}
	}
	if c.removeDir {
		err = errors.Join(err, os.RemoveAll(c.dir))
		c.removeDir = false
	}
	return err
}

// Namespace creates a namespace named prefix-<random> for the test.
func (c *ControlPlane) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// CreateReadyPod creates pod and then reports it running and ready at ip
// through the status subresource, as a kubelet does.
func (c *ControlPlane) CreateReadyPod(t testing.TB, pod *corev1.Pod, ip string) *corev1.Pod {
	t.Helper()
	if err := c.Client.Create(t.Context(), pod); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	c.SetPodStatus(t, pod, func(p *corev1.Pod) { SetReady(p, ip) })
	return pod
}

// SetPodStatus reads pod, changes its status with f and writes it through
// the status subresource, as a kubelet does.
func (c *ControlPlane) SetPodStatus(t testing.TB, pod *corev1.Pod, f func(*corev1.Pod)) {
	t.Helper()
	if err := c.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatalf("get pod %s: %v", pod.Name, err)
	}
	f(pod)
	if err := c.Client.Status().Update(t.Context(), pod); err != nil {
		t.Fatalf("update status of pod %s: %v", pod.Name, err)
	}
}

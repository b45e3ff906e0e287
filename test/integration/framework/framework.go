// Package framework starts a real kube-apiserver and etcd for the
// integration suites (one environment per suite) and gives each spec its own
// namespace.
//
// The binaries come from KUBEBUILDER_ASSETS, which `make test-integration`
// sets to the directory printed by hack/controlplane.sh.
package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/inferpick/inferpick/controllers"
)

// Env is one running control plane with the project's CRDs installed.
type Env struct {
	env    *envtest.Environment
	Config *rest.Config
	Client client.Client
}

// repoRoot is the directory holding go.mod, found from this file's path so
// suites may run from any working directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Start runs etcd and kube-apiserver, installs the CRDs from
// config/crd/bases and returns a client that knows the project's types.
func Start() (*Env, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run `make test-integration`, " +
			"or set it to the directory printed by hack/controlplane.sh")
	}
	scheme, err := controllers.NewScheme()
	if err != nil {
		return nil, err
	}
	e := &Env{env: &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}}
	e.Config, err = e.env.Start()
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	e.Client, err = client.New(e.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("client: %w", err), e.env.Stop())
	}
	return e, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error {
	if e == nil || e.env == nil {
		return nil
	}
	if err := e.env.Stop(); err != nil {
		return fmt.Errorf("stop control plane: %w", err)
	}
	return nil
}

// CreateNamespace creates a namespace with a generated name.
func (e *Env) CreateNamespace(ctx context.Context, prefix string) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := e.Client.Create(ctx, ns); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	return ns, nil
}

// DeleteNamespace deletes ns. Without a namespace controller its objects
// stay in etcd, which is harmless: every spec uses a fresh namespace.
func (e *Env) DeleteNamespace(ctx context.Context, ns *corev1.Namespace) error {
	if err := client.IgnoreNotFound(e.Client.Delete(ctx, ns)); err != nil {
		return fmt.Errorf("delete namespace %s: %w", ns.Name, err)
	}
	return nil
}

// Package framework starts a real kube-apiserver and etcd for the
// integration suites (one environment per suite) and gives each spec its own
// namespace. It is the integration suites' view of test/framework.
//
// The binaries come from KUBEBUILDER_ASSETS, which `make test-integration`
// sets to the directory printed by hack/controlplane.sh.
package framework

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferpick/inferpick/test/framework"
)

// Env is one running control plane with the project's CRDs installed.
type Env struct {
	cp     *framework.ControlPlane
	Config *rest.Config
	Client client.Client
	// Kubeconfig is a kubeconfig file for an admin, for app.Run's
	// --kubeconfig.
	Kubeconfig string
}

// Start runs etcd and kube-apiserver, installs the CRDs from
// config/crd/bases and returns a client that knows the project's types.
// Nothing keeps running when it fails.
func Start() (*Env, error) {
	cp, err := framework.StartControlPlane(framework.ControlPlaneOptions{})
	if err != nil {
		return nil, err
	}
	return &Env{cp: cp, Config: cp.Config, Client: cp.Client, Kubeconfig: cp.Kubeconfig}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error {
	if e == nil || e.cp == nil {
		return nil
	}
	return e.cp.Stop()
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

// Package e2e installs the Helm chart into a real kube-apiserver and runs the
// whole request path against it: the picker binary authenticated as the
// chart's ServiceAccount, vllm-sim processes standing in for the model-server
// Pods, and the gateway stand-in sending requests through ext_proc.
//
// There is no kubelet: the suite creates the Pods and writes their status
// (Ready, a 127.0.0.x podIP) the way a kubelet would, and runs the picker and
// the model servers as local processes on loopback addresses.
//
// It needs the control-plane binaries (KUBEBUILDER_ASSETS, see
// hack/controlplane.sh) and helm ($HELM or bin/helm); `make test-e2e` provides
// both. The picker and vllm-sim are built from this tree at the start.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	"github.com/inferpick/inferpick/test/framework"
)

const repoRoot = "../.."

// suite holds what every spec shares: the API server, an admin client and
// kubeconfig, and the binaries.
var suite struct {
	env        *envtest.Environment
	cfg        *rest.Config
	client     client.Client
	clientset  kubernetes.Interface
	kubeconfig string // admin kubeconfig file, for helm and kubectl
	helm       string
	kubectl    string
	picker     string
	vllmSim    string
	chart      string
	tmp        string
}

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "inferpick end-to-end")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	logf.SetLogger(GinkgoLogr)
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	Expect(assets).NotTo(BeEmpty(), "KUBEBUILDER_ASSETS must name the directory printed by hack/controlplane.sh (make test-e2e sets it)")
	suite.kubectl = filepath.Join(assets, "kubectl")
	Expect(suite.kubectl).To(BeAnExistingFile(), "kubectl is built by hack/controlplane.sh")
	suite.helm = os.Getenv("HELM")
	if suite.helm == "" {
		suite.helm = absPath(filepath.Join(repoRoot, "bin", "helm"))
	}
	Expect(suite.helm).To(BeAnExistingFile(), "no helm: set $HELM or run `make helm`")
	suite.chart = absPath(filepath.Join(repoRoot, "charts", "inferpick"))

	suite.tmp = GinkgoT().TempDir()
	By("building the picker and the model-server simulator")
	suite.picker = goBuild(ctx, "./cmd/inferpick", "inferpick")
	suite.vllmSim = goBuild(ctx, "./cmd/vllm-sim", "vllm-sim")

	By("starting kube-apiserver and etcd with the Gateway API CRDs")
	gatewayCRDs := moduleDir(ctx, "sigs.k8s.io/gateway-api")
	cp, err := framework.StartControlPlane(framework.ControlPlaneOptions{
		AssetsDir:   assets,
		CRDPaths:    []string{filepath.Join(gatewayCRDs, "config", "crd", "standard")},
		Scheme:      newScheme(),
		Dir:         suite.tmp,
		StopTimeout: time.Minute,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		By("stopping the control plane")
		Expect(cp.Stop()).To(Succeed())
	})
	suite.env, suite.cfg, suite.client, suite.kubeconfig = cp.Env, cp.Config, cp.Client, cp.Kubeconfig
	suite.clientset, err = kubernetes.NewForConfig(cp.Config)
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(5*time.Minute))

// newScheme knows every kind the suite reads: built-in, CRDs, InferencePool
// and the Gateway API.
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(inferencev1.AddToScheme(s))
	utilruntime.Must(gatewayv1.Install(s))
	return s
}

// goBuild builds pkg of this module into the suite's directory.
func goBuild(ctx context.Context, pkg, name string) string {
	dir := filepath.Join(suite.tmp, "bin-"+name)
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	out, err := framework.Build(ctx, dir, pkg)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// moduleDir returns the directory of a module this one requires, from the
// module cache.
func moduleDir(ctx context.Context, module string) string {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = absPath(repoRoot)
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	b, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "go list -m %s", module)
	dir := strings.TrimSpace(string(b))
	Expect(dir).NotTo(BeEmpty(), "module %s is not in the module cache: run `go mod download %s`", module, module)
	return dir
}

func absPath(p string) string {
	a, err := filepath.Abs(p)
	Expect(err).NotTo(HaveOccurred())
	return a
}

// run runs a CLI (helm, kubectl) with the admin kubeconfig and returns its
// stdout; a failure fails the spec with stderr.
func run(ctx context.Context, bin string, args ...string) string {
	GinkgoHelper()
	out, errOut, err := runErr(ctx, bin, args...)
	Expect(err).NotTo(HaveOccurred(), "%s %v:\n%s%s", filepath.Base(bin), args, out, errOut)
	return out
}

// runErr is run without the assertion.
func runErr(ctx context.Context, bin string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	home := filepath.Join(suite.tmp, "home")
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+suite.kubeconfig,
		"HOME="+home,
		"HELM_CONFIG_HOME="+filepath.Join(home, "helm", "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "helm", "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "helm", "data"),
	)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %w", filepath.Base(bin), err)
	}
	return out.String(), errOut.String(), err
}

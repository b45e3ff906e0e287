package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The providers' own CRDs, from the Go modules that publish them. GKE's
// policies and Managed Prometheus's PodMonitoring have no such module; the
// chart's golden renderings cover them.
var providerCRDs = []struct{ module, file, crd string }{
	{"istio.io/api@v1.32.0", "kubernetes/customresourcedefinitions.gen.yaml", "destinationrules.networking.istio.io"},
	{"github.com/prometheus-operator/prometheus-operator@v0.85.0",
		"example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml", "servicemonitors.monitoring.coreos.com"},
}

var _ = Describe("The chart's provider objects", Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		for _, p := range providerCRDs {
			crd := readCRD(downloadModule(ctx, p.module), p.file, p.crd)
			Expect(client.IgnoreAlreadyExists(suite.client.Create(ctx, crd))).To(Succeed())
			Eventually(func(g Gomega) {
				g.Expect(suite.client.Get(ctx, client.ObjectKeyFromObject(crd), crd)).To(Succeed())
				g.Expect(crd.Status.Conditions).To(ContainElement(And(
					HaveField("Type", apiextensionsv1.Established), HaveField("Status", apiextensionsv1.ConditionTrue))))
			}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		}
	}, NodeTimeout(5*time.Minute))

	// Strict field validation on a dry-run create: a field the provider's
	// schema does not know fails, where a plain create would drop it.
	It("are accepted by the Istio and prometheus-operator schemas", func(ctx SpecContext) {
		values := filepath.Join(repoRoot, "test", "e2e", "chart", "testdata", "values")
		out := run(ctx, suite.helm, "template", release, suite.chart, "--namespace", "default",
			"--values", absPath(filepath.Join(values, "pool.yaml")), "--values", absPath(filepath.Join(values, "istio.yaml")),
			"--set", "picker.kvEvents.listenPort=5557") // the DestinationRule's port-level TLS setting of the kv-events port
		checked := map[string]bool{}
		for _, u := range decodeManifest(out) {
			switch u.GetKind() {
			case "DestinationRule", "ServiceMonitor":
				err := suite.client.Create(ctx, u, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
				Expect(err).NotTo(HaveOccurred(), "%s %s", u.GetKind(), u.GetName())
				checked[u.GetKind()] = true
			}
		}
		Expect(checked).To(HaveLen(2), "both objects rendered")
	})

	It("would be refused with a misspelled field", func(ctx SpecContext) {
		dr := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
			"metadata": map[string]any{"name": "typo", "namespace": "default"},
			"spec":     map[string]any{"host": "x", "trafficPolicy": map[string]any{"tls": map[string]any{"mode": "SIMPLE", "insecureSkipVerfy": true}}},
		}}
		err := suite.client.Create(ctx, dr, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
		Expect(err).To(MatchError(ContainSubstring("insecureSkipVerfy")))
	})
})

// downloadModule fetches module@version through the Go module proxy (once,
// into the module cache) and returns its directory.
func downloadModule(ctx context.Context, modVersion string) string {
	GinkgoHelper()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", modVersion)
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod")
	cmd.Dir = os.TempDir() // outside this module: no go.mod involved
	b, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "go mod download %s: %s", modVersion, b)
	var m struct{ Dir, Error string }
	Expect(json.Unmarshal(b, &m)).To(Succeed())
	Expect(m.Error).To(BeEmpty())
	return m.Dir
}

// readCRD finds the CRD named name in a multi-document file.
func readCRD(dir, file, name string) *apiextensionsv1.CustomResourceDefinition {
	GinkgoHelper()
	f, err := os.Open(filepath.Join(dir, file))
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := dec.Decode(crd)
		if errors.Is(err, io.EOF) {
			break
		}
		Expect(err).NotTo(HaveOccurred())
		if crd.Name == name {
			crd.ResourceVersion = ""
			return crd
		}
	}
	Fail("no CRD " + name + " in " + strings.TrimPrefix(file, dir))
	return nil
}

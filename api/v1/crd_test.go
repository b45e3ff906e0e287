package v1_test

import (
	"bytes"
	"os"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

const crdPath = "../../config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"

func loadCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	raw, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}

// Tools that check which upstream schema a cluster has read this annotation.
// The schema is upstream v1.6.0's: v1.5.0's with spec.endpointPickerRef
// optional, so every pool v1.5.0 admits is admitted, and so is one without
// a picker.
func TestCRDNamesUpstreamBundleVersion(t *testing.T) {
	if got := loadCRD(t).Annotations["inference.networking.k8s.io/bundle-version"]; got != "v1.6.0" {
		t.Errorf("bundle-version annotation %q, want v1.6.0", got)
	}
}

// A pool without spec.endpointPickerRef, which the CRD has always admitted
// (and upstream admits since v1.6.0), stays valid: requiring the field, as
// upstream v1.5.0 did, would refuse every change to such a pool. The API
// server's admission of one is in test/integration/crd.
func TestCRDLeavesTheEndpointPickerOptional(t *testing.T) {
	spec := loadCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	if diff := cmp.Diff([]string{"selector", "targetPorts"}, spec.Required); diff != "" {
		t.Errorf("spec.required (-want +got):\n%s", diff)
	}
}

// kubectl get infpool shows every target port of a pool. The API server
// prints the first value a column's JSONPath finds, so the column must
// find the whole list.
func TestCRDPortsColumnListsEveryPort(t *testing.T) {
	var path string
	for _, c := range loadCRD(t).Spec.Versions[0].AdditionalPrinterColumns {
		if c.Name == "Ports" {
			path = c.JSONPath
		}
	}
	if path == "" {
		t.Fatal("no Ports column")
	}
	pool := map[string]any{"spec": map[string]any{"targetPorts": []any{
		map[string]any{"number": int64(8000)}, map[string]any{"number": int64(8001)},
	}}}
	jp := jsonpath.New("Ports")
	if err := jp.Parse("{" + path + "}"); err != nil {
		t.Fatal(err)
	}
	results, err := jp.FindResults(pool)
	if err != nil || len(results) == 0 || len(results[0]) == 0 {
		t.Fatalf("column %s finds nothing: %v", path, err)
	}
	var buf bytes.Buffer
	if err := jp.PrintResults(&buf, []reflect.Value{reflect.ValueOf(results[0][0].Interface())}); err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{"8000", "8001"} {
		if !bytes.Contains(buf.Bytes(), []byte(port)) {
			t.Errorf("Ports column shows %q, missing port %s", buf.String(), port)
		}
	}
}

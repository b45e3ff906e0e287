package v1_test

import (
	"bytes"
	"os"
	"reflect"
	"testing"

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
func TestCRDNamesUpstreamBundleVersion(t *testing.T) {
	if got := loadCRD(t).Annotations["inference.networking.k8s.io/bundle-version"]; got != "v1.5.0" {
		t.Errorf("bundle-version annotation %q, want v1.5.0", got)
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

package chart

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/policy/fileconfig"
)

// Every key of the picker's policy config can be set through the chart's
// values: the values schema, which refuses keys it does not list, takes a
// config with every field set, and the ConfigMap hands it to the picker
// unchanged.
func TestEveryPolicyKeyPassesTheValues(t *testing.T) {
	var full policy.Config
	fill(t, reflect.ValueOf(&full).Elem())
	full.Name, full.CacheAware.Mode = policy.CacheAware, "cost"
	full.MetricsStaleness = policy.Duration{Duration: 3 * time.Second}
	full.CacheAware.MatchThreshold, full.CacheAware.BalanceRel, full.KVCacheThreshold = 0.5, 2, 0.75
	full.SessionAffinity.Header, full.SessionAffinity.Key, full.SessionAffinity.Mode = "x-session-id", policy.SessionID, policy.SessionPrefer
	full.WeightedScorer.ActiveRequest.MaxBusyScore = 0.5
	full.ContextLength.Label = "example.com/prompt-tokens"
	*full.SLO.ExploreNegative = 0.25
	filters := []policy.LabelFilter{
		{Label: "example.com/gpu", Values: []string{"h100", ""}, AllowsNoLabel: true},
		{Selector: &policy.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}, MatchExpressions: []policy.LabelRequirement{
			{Key: "zone", Operator: "NotIn", Values: []string{"c"}}, {Key: "drain", Operator: "DoesNotExist"}}}},
	}
	full.LabelFilters, full.Disaggregation.PrefillLabelFilters, full.Disaggregation.PrefillPods = filters, filters, policy.PrefillPodsAll
	full.Disaggregation.Encode, full.Disaggregation.EncodeLabelFilters = policy.EncodeMultimodal, filters
	doc, err := yaml.Marshal(map[string]any{"picker": map[string]any{"config": full}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := template(t, "--values", filepath.Join("testdata", "values", "pool.yaml"), "--values", file)
	if err != nil {
		t.Fatalf("helm template with every policy key: %v\n%s\nvalues:\n%s", err, errOut, doc)
	}
	var cm corev1.ConfigMap
	if !parseManifest(t, out).decode(t, "ConfigMap", &cm) {
		t.Fatal("no ConfigMap")
	}
	var fc struct {
		Policy policy.Config `json:"policy"`
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), &fc); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	if diff := cmp.Diff(full, fc.Policy); diff != "" {
		t.Errorf("policy config through the chart (-values +ConfigMap):\n%s", diff)
	}
}

// fill sets every number in v, struct fields included, to a value the
// config accepts, distinct per field so that a key carried to the wrong
// field shows.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	n := 0
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				walk(v.Field(i))
			}
		case reflect.Int, reflect.Int64:
			n++
			v.SetInt(int64(n))
		case reflect.Float64:
			n++
			v.SetFloat(float64(n) + 0.5)
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			walk(v.Elem())
		case reflect.Bool:
			v.SetBool(true)
		case reflect.String, reflect.Slice:
			// Set by the caller: a string or a list of one field may need
			// a value of its own.
		default:
			t.Fatalf("policy config field of kind %s: teach fill to set it", v.Kind())
		}
	}
	walk(v)
}

// Disaggregation of every request (minUncachedTokens 0, or an empty
// block) is a value the YAML of the ConfigMap could lose on the way: the
// picker must still read the block as present.
func TestDisaggregationOfEveryRequestPassesTheValues(t *testing.T) {
	for name, tc := range map[string]struct {
		block string
		want  int // the minUncachedTokens the picker reads
	}{
		"minUncachedTokens 0": {"disaggregation: {minUncachedTokens: 0}", 0},
		"an empty block":      {"disaggregation: {}", 0},
		"minUncachedTokens 8": {"disaggregation: {minUncachedTokens: 8}", 8},
	} {
		t.Run(name, func(t *testing.T) {
			f, doc := pickerConfig(t, "picker:\n  config:\n    "+tc.block+"\n")
			want := &policy.DisaggregationConfig{MinUncachedTokens: tc.want}
			if diff := cmp.Diff(want, f.Policy.Disaggregation); diff != "" {
				t.Errorf("disaggregation the picker reads (-want +got):\n%s\nconfig.yaml:\n%s", diff, doc)
			}
		})
	}
}

// The slo block reaches the picker as the values give it, an empty one
// included (which turns routing by latency objectives on with its
// defaults), and the picker's container is the only one: no predictor
// sidecar.
func TestSLOBlockPassesTheValues(t *testing.T) {
	for name, tc := range map[string]struct {
		block string
		want  *policy.SLOConfig
	}{
		"an empty block": {"slo: {}", &policy.SLOConfig{}},
		"admission":      {"slo: {admission: true}", &policy.SLOConfig{Admission: true}},
		"every field":    {"slo: {bufferFactor: 1.2, exploreNegative: 0, wholeResponse: true, admission: true}", &policy.SLOConfig{BufferFactor: 1.2, ExploreNegative: new(float64), WholeResponse: true, Admission: true}},
	} {
		t.Run(name, func(t *testing.T) {
			f, doc := pickerConfig(t, "picker:\n  config:\n    "+tc.block+"\n")
			if diff := cmp.Diff(tc.want, f.Policy.SLO); diff != "" {
				t.Errorf("slo block the picker reads (-want +got):\n%s\nconfig.yaml:\n%s", diff, doc)
			}
		})
	}
	out, errOut, err := template(t, "--values", filepath.Join("testdata", "values", "pool.yaml"), "--values", filepath.Join("testdata", "values", "slo.yaml"))
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, errOut)
	}
	var dep appsv1.Deployment
	if !parseManifest(t, out).decode(t, "Deployment", &dep) {
		t.Fatal("no Deployment")
	}
	if names := containerNames(&dep); len(names) != 1 {
		t.Errorf("containers %v with the slo block, want the picker's alone", names)
	}
}

// A context-length block the values leave empty (the default label, no
// filter) still reaches the picker as a block, which turns the label's
// reading on.
func TestAnEmptyContextLengthBlockPassesTheValues(t *testing.T) {
	for name, tc := range map[string]struct {
		block string
		want  policy.ContextLengthConfig
	}{
		"an empty block":         {"contextLength: {}", policy.ContextLengthConfig{}},
		"filter false":           {"contextLength: {filter: false}", policy.ContextLengthConfig{}},
		"a label and the filter": {"contextLength: {label: example.com/tokens, filter: true}", policy.ContextLengthConfig{Label: "example.com/tokens", Filter: true}},
	} {
		t.Run(name, func(t *testing.T) {
			f, doc := pickerConfig(t, "picker:\n  config:\n    "+tc.block+"\n")
			if diff := cmp.Diff(&tc.want, f.Policy.ContextLength); diff != "" {
				t.Errorf("contextLength the picker reads (-want +got):\n%s\nconfig.yaml:\n%s", diff, doc)
			}
		})
	}
}

// The attributes of the values reach the picker as the config file's
// attributes, in their order and with what YAML could mangle on the way
// (a multi-line expression, a quoted condition) intact.
func TestAttributesPassTheValues(t *testing.T) {
	type attr struct{ Namespace, Name, Expression, Condition string }
	for name, tc := range map[string]struct {
		values string
		want   []attr
	}{
		"the attribute of upstream's sample alone": {
			values: "picker:\n  attributes:\n  - name: x-gateway-inference-request-cost\n    expression: |\n      usage.completion_tokens\n    condition: has(usage.completion_tokens)\n",
			want:   []attr{{"envoy.lb", "x-gateway-inference-request-cost", "usage.completion_tokens\n", "has(usage.completion_tokens)"}},
		},
		"two beside a policy": {
			values: "picker:\n  config: {name: least-load}\n  attributes:\n" +
				"  - {namespace: billing, name: prompt, expression: usage.prompt_tokens}\n" +
				"  - {name: out, expression: 'usage.completion_tokens * 2.0', condition: 'usage.completion_tokens > 0 && !(usage.prompt_tokens == 0)'}\n",
			want: []attr{
				{"billing", "prompt", "usage.prompt_tokens", ""},
				{"envoy.lb", "out", "usage.completion_tokens * 2.0", "usage.completion_tokens > 0 && !(usage.prompt_tokens == 0)"},
			},
		},
		"none": {
			values: "picker:\n  attributes: []\n",
		},
	} {
		t.Run(name, func(t *testing.T) {
			f, doc := pickerConfig(t, tc.values)
			var got []attr
			for _, a := range f.Attributes {
				x := attr{Namespace: a.Namespace, Name: a.Name, Expression: a.Expression.String()}
				if a.Condition != nil {
					x.Condition = a.Condition.String()
				}
				got = append(got, x)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("attributes the picker reads (-want +got):\n%s\nconfig.yaml:\n%s", diff, doc)
			}
		})
	}
}

// pickerConfig renders the chart with testdata/values/pool.yaml and the
// given values, and returns the config file the picker reads from the
// ConfigMap, parsed, and its text.
func pickerConfig(t *testing.T, values string) (fileconfig.File, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := template(t, "--values", filepath.Join("testdata", "values", "pool.yaml"), "--values", file)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, errOut)
	}
	var cm corev1.ConfigMap
	if !parseManifest(t, out).decode(t, "ConfigMap", &cm) {
		t.Fatal("no ConfigMap")
	}
	doc := cm.Data["config.yaml"]
	f, err := fileconfig.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("config.yaml: %v\n%s", err, doc)
	}
	return f, doc
}

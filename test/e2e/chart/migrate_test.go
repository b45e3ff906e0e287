package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	"github.com/inferpick/inferpick/picker/attrexpr"
	"github.com/inferpick/inferpick/picker/policy/fileconfig"
)

// TestMigrateValues converts realistic upstream inferencepool values files
// (testdata/upstream) with hack/migrate-values, compares the result with
// its golden file, and installs it the way a user would: the chart must
// accept it and render what the upstream values asked for.
func TestMigrateValues(t *testing.T) {
	tool := buildMigrateValues(t)
	tests := map[string]struct {
		check func(t *testing.T, m manifest)
		notes []string // substrings of the notes printed
	}{
		"gke": {
			check: func(t *testing.T, m manifest) {
				want := []string{"GCPBackendPolicy/llama", "HealthCheckPolicy/llama", "HTTPRoute/llama", "PodMonitoring/llama-inferpick"}
				for _, k := range want {
					if !slices.Contains(m.kinds(), k) {
						t.Errorf("no %s among %v", k, m.kinds())
					}
				}
				if slices.ContainsFunc(m.kinds(), func(k string) bool { return strings.HasPrefix(k, "ServiceMonitor/") }) {
					t.Error("a ServiceMonitor on GKE, where upstream scrapes with Managed Prometheus only")
				}
			},
			notes: []string{"weighted-scorer"},
		},
		"istio": {
			check: func(t *testing.T, m manifest) {
				var pool inferencev1.InferencePool
				m.decode(t, "InferencePool", &pool)
				if pool.Spec.EndpointPickerRef.FailureMode != inferencev1.EndpointPickerFailClose {
					t.Errorf("failureMode %s, the upstream values' FailClose lost", pool.Spec.EndpointPickerRef.FailureMode)
				}
				args := pickerArgs(t, m)
				for _, a := range []string{"--objective-priorities=interactive=5,batch=1", "--model-server-type=sglang", "-v=3"} {
					if !slices.Contains(args, a) {
						t.Errorf("picker args %q lack %q", args, a)
					}
				}
				m.only(t, "DestinationRule")
				// The upstream values leave monitoring.interval at its
				// default, which scrapes every 10s.
				endpoints, _, _ := unstructured.NestedSlice(m.only(t, "ServiceMonitor").Object, "spec", "endpoints")
				if len(endpoints) != 1 || endpoints[0].(map[string]any)["interval"] != "10s" {
					t.Errorf("ServiceMonitor endpoints %v, want one scraped every 10s as upstream's", endpoints)
				}
			},
			notes: []string{"--objective-priorities"},
		},
		"ha": {
			check: func(t *testing.T, m manifest) {
				var dep appsv1.Deployment
				m.decode(t, "Deployment", &dep)
				if *dep.Spec.Replicas != 3 || dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
					t.Errorf("replicas %d strategy %s, want 3 under a rolling update (every active-active replica is ready)", *dep.Spec.Replicas, dep.Spec.Strategy.Type)
				}
				args := pickerArgs(t, m)
				for _, a := range []string{"--ha-enable-leader-election", "--ha-mode=active-active"} {
					if !slices.Contains(args, a) {
						t.Errorf("picker args %q lack %q with 3 replicas", args, a)
					}
				}
			},
		},
		"custom-flags": {
			check: func(t *testing.T, m manifest) {
				args := pickerArgs(t, m)
				for _, a := range []string{"--secure-serving=false", "--refresh-metrics-interval=100ms", "--zap-encoder=json",
					"--kv-cache-usage-percentage-metric=vllm:kv_cache_usage_perc"} {
					if !slices.Contains(args, a) {
						t.Errorf("picker args %q lack %q", args, a)
					}
				}
				var dep appsv1.Deployment
				m.decode(t, "Deployment", &dep)
				if names := containerNames(&dep); !slices.Equal(names, []string{"picker", "envoy-proxy"}) {
					t.Errorf("containers %v, want the picker and the sidecar", names)
				}
			},
			notes: []string{"llm-d-inference-scheduler", "extraServicePorts", "sidecar.configMap"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, notes := migrate(t, tool, filepath.Join("testdata", "upstream", name+".yaml"))
			for _, n := range tc.notes {
				if !strings.Contains(notes, n) {
					t.Errorf("notes do not mention %q:\n%s", n, notes)
				}
			}
			golden := filepath.Join("testdata", "upstream", name+".inferpick.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			} else if want, err := os.ReadFile(golden); err != nil {
				t.Fatalf("read golden file (run with -update to create it): %v", err)
			} else if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("converted values differ from %s (-want +got):\n%s", golden, diff)
			}

			m := renderConverted(t, got)
			checkSelectorKept(t, filepath.Join("testdata", "upstream", name+".yaml"), m)
			// The upstream chart's picker writes JSON lines.
			if args := pickerArgs(t, m); !slices.Contains(args, "--zap-encoder=json") {
				t.Errorf("picker args %q lack --zap-encoder=json", args)
			}
			tc.check(t, m)
		})
	}
}

// TestMigratedValuesTheUpstreamChartQuotes converts values the upstream
// chart takes because it renders them as strings into its templates: the
// inferpick chart must accept what the converter makes of them, and the
// picker be given the same setting.
func TestMigratedValuesTheUpstreamChartQuotes(t *testing.T) {
	tool := buildMigrateValues(t)
	tests := map[string]struct {
		upstream     string
		wantArgs     []string
		wantSelector map[string]string // the pool's, when given
	}{
		"selector values that are no strings": {
			upstream:     "inferencePool:\n  modelServers:\n    matchLabels:\n      llm-d.ai/inferenceServing: true\n      version: 2\n",
			wantSelector: map[string]string{"llm-d.ai/inferenceServing": "true", "version": "2"},
		},
		"a quoted verbosity": {
			upstream: "inferenceExtension:\n  flags:\n    v: \"2\"\n",
			wantArgs: []string{"-v=2"},
		},
		"a verbosity above 10: klog takes it": {
			upstream: "inferenceExtension:\n  flags:\n    v: 12\n",
			wantArgs: []string{"-v=12"},
		},
		"a quoted model-server metrics port": {
			upstream: "inferenceExtension:\n  flags:\n    model-server-metrics-port: \"8001\"\n",
			wantArgs: []string{"--model-server-metrics-port=8001"},
		},
		"quoted fallbacks and body limit": {
			upstream: "inferenceExtension:\n  flags:\n    fallbacks: \"1\"\n    max-request-body-bytes: \"2000000\"\n",
			wantArgs: []string{"--fallbacks=1", "--max-request-body-bytes=2000000"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			upstream := tc.upstream
			if !strings.Contains(upstream, "inferencePool:") {
				upstream += "inferencePool:\n  modelServers: {matchLabels: {app: vllm}}\n"
			}
			in := filepath.Join(t.TempDir(), "upstream.yaml")
			if err := os.WriteFile(in, []byte(upstream), 0o644); err != nil {
				t.Fatal(err)
			}
			converted, _ := migrate(t, tool, in)
			m := renderConverted(t, converted)
			args := pickerArgs(t, m)
			for _, a := range tc.wantArgs {
				if !slices.Contains(args, a) {
					t.Errorf("picker args %q lack %q", args, a)
				}
			}
			if tc.wantSelector != nil {
				if diff := cmp.Diff(tc.wantSelector, poolSelector(t, m)); diff != "" {
					t.Errorf("pool selector (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestMigratedReporterReachesThePicker converts upstream values whose
// pluginsCustomConfig is upstream's request-attribute-reporter sample and
// installs the result: the picker reads from the chart's config.yaml the
// attributes it read from the upstream file, so the gateway keeps getting
// x-gateway-inference-request-cost.
func TestMigratedReporterReachesThePicker(t *testing.T) {
	tool := buildMigrateValues(t)
	sample, err := os.ReadFile(filepath.Join(repoRoot, "picker", "policy", "fileconfig", "testdata", "gie-v1.5.0-request-attribute-reporter-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	upstream := "inferenceExtension:\n  pluginsConfigFile: cost.yaml\n  pluginsCustomConfig:\n    cost.yaml: |\n" +
		"      " + strings.ReplaceAll(strings.TrimSuffix(string(sample), "\n"), "\n", "\n      ") + "\n" +
		"inferencePool:\n  modelServers: {matchLabels: {app: vllm}}\n"
	in := filepath.Join(t.TempDir(), "upstream.yaml")
	if err := os.WriteFile(in, []byte(upstream), 0o644); err != nil {
		t.Fatal(err)
	}
	converted, _ := migrate(t, tool, in)
	var cm corev1.ConfigMap
	if !renderConverted(t, converted).decode(t, "ConfigMap", &cm) {
		t.Fatal("no ConfigMap")
	}
	got, err := fileconfig.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("config.yaml: %v\n%s", err, cm.Data["config.yaml"])
	}
	want, err := fileconfig.Parse(sample)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Attributes, got.Attributes, cmp.Comparer(func(a, b *attrexpr.Expr) bool { return a.String() == b.String() })); diff != "" {
		t.Errorf("attributes the picker reads after migration (-upstream file +chart):\n%s\nconfig.yaml:\n%s", diff, cm.Data["config.yaml"])
	}
}

// buildMigrateValues builds hack/migrate-values and returns its path.
func buildMigrateValues(t *testing.T) string {
	t.Helper()
	tool := filepath.Join(t.TempDir(), "migrate-values")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", tool, "./hack/migrate-values")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return tool
}

// migrate runs the migrate-values tool on an upstream values file and
// returns the converted values and the notes it printed.
func migrate(t *testing.T, tool, upstreamFile string) (converted []byte, notes string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), tool, upstreamFile)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	converted, err := cmd.Output()
	if err != nil {
		t.Fatalf("migrate-values: %v\n%s", err, stderr.String())
	}
	return converted, stderr.String()
}

// renderConverted renders the chart with the converted values, which it
// must accept, and returns the manifests.
func renderConverted(t *testing.T, converted []byte) manifest {
	t.Helper()
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, converted, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := template(t, "--values", values)
	if err != nil {
		t.Fatalf("the chart refuses the converted values: %v\n%s\nconverted:\n%s", err, errOut, converted)
	}
	return parseManifest(t, out)
}

// checkSelectorKept checks that the pool selects the pods by exactly the
// labels the upstream values named: none of the chart's own added, which
// would leave the pool matching no pods.
func checkSelectorKept(t *testing.T, upstreamFile string, m manifest) {
	t.Helper()
	raw, err := os.ReadFile(upstreamFile)
	if err != nil {
		t.Fatal(err)
	}
	var upstream struct {
		InferencePool struct {
			ModelServers struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"modelServers"`
		} `json:"inferencePool"`
	}
	if err := yaml.Unmarshal(raw, &upstream); err != nil {
		t.Fatalf("parse %s: %v", upstreamFile, err)
	}
	if diff := cmp.Diff(upstream.InferencePool.ModelServers.MatchLabels, poolSelector(t, m)); diff != "" {
		t.Errorf("pool selector differs from the upstream values' (-want +got):\n%s", diff)
	}
}

// poolSelector returns the labels the rendered pool selects its pods by.
func poolSelector(t *testing.T, m manifest) map[string]string {
	t.Helper()
	var pool inferencev1.InferencePool
	if !m.decode(t, "InferencePool", &pool) {
		t.Fatal("no InferencePool")
	}
	got := map[string]string{}
	for k, v := range pool.Spec.Selector.MatchLabels {
		got[string(k)] = string(v)
	}
	return got
}

func pickerArgs(t *testing.T, m manifest) []string {
	t.Helper()
	var dep appsv1.Deployment
	if !m.decode(t, "Deployment", &dep) {
		t.Fatal("no Deployment")
	}
	return dep.Spec.Template.Spec.Containers[0].Args
}

func containerNames(dep *appsv1.Deployment) []string {
	var names []string
	for i := range dep.Spec.Template.Spec.Containers {
		names = append(names, dep.Spec.Template.Spec.Containers[i].Name)
	}
	return names
}

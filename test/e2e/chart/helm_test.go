// Package chart tests the Helm chart in charts/inferpick with the helm CLI:
// lint, rendered manifests against golden files, the values schema, and the
// rendered objects decoded strictly into their API types.
//
// The helm binary comes from $HELM, else bin/helm (make helm).
package chart

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current chart")

const (
	repoRoot  = "../../.."
	release   = "llama"
	namespace = "serving"
	// kubeVersion is the Kubernetes version the chart is rendered for.
	kubeVersion = "1.36.3"
)

var chartDir = filepath.Join(repoRoot, "charts", "inferpick")

// helmPath returns the helm binary to run, failing the test when there is none.
func helmPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HELM"); p != "" {
		return p
	}
	p, err := filepath.Abs(filepath.Join(repoRoot, "bin", "helm"))
	if err != nil {
		t.Fatalf("resolve bin/helm: %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no helm binary: set $HELM or run `make helm` (%v)", err)
	}
	return p
}

// helm runs the helm CLI with a scratch home, so no user configuration or
// repository cache takes part, and returns stdout and stderr.
func helm(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.CommandContext(t.Context(), helmPath(t), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"),
	)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// template runs `helm template` for the release in its namespace with the
// given flags alone, and returns stdout and stderr.
func template(t *testing.T, flags ...string) (stdout, stderr string, err error) {
	t.Helper()
	return templateAs(t, release, namespace, kubeVersion, flags...)
}

// templateAs runs `helm template` for release rel in namespace ns, on
// Kubernetes kube, with the given flags alone.
func templateAs(t *testing.T, rel, ns, kube string, flags ...string) (stdout, stderr string, err error) {
	t.Helper()
	return helm(t, append([]string{"template", rel, chartDir, "--namespace", ns, "--kube-version", kube}, flags...)...)
}

// render runs `helm template` for the release with valuesArgs.
func render(t *testing.T, valuesFiles []string, sets ...string) (string, string, error) {
	t.Helper()
	return template(t, valuesArgs(valuesFiles, sets...)...)
}

// valuesArgs are the flags of testdata/values/pool.yaml (the pool's
// selector, which has no default), then the given values files (under
// testdata/values) and --set arguments.
func valuesArgs(valuesFiles []string, sets ...string) []string {
	var args []string
	for _, f := range append([]string{"pool.yaml"}, valuesFiles...) {
		args = append(args, "--values", filepath.Join("testdata", "values", f))
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

// renderUnless renders the --set arguments and returns the manifests, or,
// when wantFail is set, checks that the render fails saying so and returns
// false.
func renderUnless(t *testing.T, wantFail string, sets ...string) (string, bool) {
	t.Helper()
	out, errOut, err := render(t, nil, sets...)
	switch {
	case wantFail != "":
		if err == nil || !strings.Contains(errOut, wantFail) {
			t.Fatalf("rendered (err %v), want a failure saying %q:\n%s", err, wantFail, errOut)
		}
		return "", false
	case err != nil:
		t.Fatalf("helm template: %v\n%s", err, errOut)
	}
	return out, true
}

// cases are the value sets every rendering test covers; each has a golden
// file testdata/<name>.golden.
var cases = map[string][]string{
	"default":       nil,
	"ha":            {"ha.yaml"},
	"httproute":     {"httproute.yaml"},
	"existing-pool": {"existing-pool.yaml"},
	"tls-secret":    {"tls-secret.yaml"},
	"hardened":      {"hardened.yaml"},
	"gke":           {"gke.yaml"},
	"istio":         {"istio.yaml"},
	"kv-listen":     {"kv-listen.yaml"},
	"slo":           {"slo.yaml"},
}

func TestLint(t *testing.T) {
	for name, files := range cases {
		t.Run(name, func(t *testing.T) {
			args := []string{"lint", chartDir, "--strict", "--namespace", namespace, "--kube-version", kubeVersion}
			for _, f := range append([]string{"pool.yaml"}, files...) {
				args = append(args, "--values", filepath.Join("testdata", "values", f))
			}
			out, errOut, err := helm(t, args...)
			if err != nil {
				t.Fatalf("helm lint: %v\n%s%s", err, out, errOut)
			}
		})
	}
}

func TestTemplateGolden(t *testing.T) {
	for name, files := range cases {
		t.Run(name, func(t *testing.T) {
			got, errOut, err := render(t, files)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden file (run with -update to create it): %v", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("rendered chart differs from %s (-want +got); run `go test ./test/e2e/chart -update` after an intended change:\n%s",
					golden, diff)
			}
		})
	}
}

// TestBadValues checks that the schema rejects wrong values before anything
// is rendered, with a message that names the offending key.
func TestBadValues(t *testing.T) {
	tests := map[string]struct {
		sets []string
		want []string
	}{
		"a flow-control wait of zero, which the picker refuses at start": {
			sets: []string{"picker.flowControl.enabled=true", "picker.flowControl.maxWait=0m0s"},
			want: []string{"maxWait"},
		},
		"an attribute without an expression": {
			sets: []string{"picker.attributes[0].name=cost"},
			want: []string{"attributes", "expression"},
		},
		"an attribute in upstream's key form": {
			sets: []string{"picker.attributes[0].key.name=cost", "picker.attributes[0].name=cost", "picker.attributes[0].expression=usage.total_tokens"},
			want: []string{"attributes", "key"},
		},
		"a share of exploring picks above 1": {
			sets: []string{"picker.config.slo.exploreNegative=1.5"},
			want: []string{"slo", "exploreNegative"},
		},
		"a headroom factor of 0": {
			sets: []string{"picker.config.slo.bufferFactor=0"},
			want: []string{"slo", "bufferFactor"},
		},
		"a context-length label Kubernetes refuses": {
			sets: []string{"picker.config.contextLength.label=a label"},
			want: []string{"contextLength", "label", "pattern"},
		},
		"a context-length label with a prefix and no name": {
			sets: []string{"picker.config.contextLength.label=example.com/"},
			want: []string{"contextLength", "label", "pattern"},
		},
		"a context-length label whose prefix is over 253 characters": {
			sets: []string{"picker.config.contextLength.label=" + strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60) + "." + strings.Repeat("e", 20) + "/tokens"},
			want: []string{"contextLength", "label"},
		},
		"a label filter that is both a label and a selector": {
			sets: []string{"picker.config.labelFilters[0].label=gpu", "picker.config.labelFilters[0].values[0]=h100", "picker.config.labelFilters[0].selector.matchLabels.tier=gold"},
			want: []string{"labelFilters", "oneOf"},
		},
		"a prefill label filter with an operator Kubernetes has not": {
			sets: []string{"picker.config.disaggregation.prefillLabelFilters[0].selector.matchExpressions[0].key=k", "picker.config.disaggregation.prefillLabelFilters[0].selector.matchExpressions[0].operator=Gt"},
			want: []string{"prefillLabelFilters", "operator"},
		},
		"a by-label filter with neither values nor allowsNoLabel, which keeps no pod": {
			sets: []string{"picker.config.labelFilters[0].label=gpu"},
			want: []string{"labelFilters", "values", "allowsNoLabel"},
		},
		"a by-label filter with allowsNoLabel false and no values": {
			sets: []string{"picker.config.labelFilters[0].label=gpu", "picker.config.labelFilters[0].allowsNoLabel=false"},
			want: []string{"labelFilters", "allowsNoLabel", "must be true"},
		},
		"a selector's In without values": {
			sets: []string{"picker.config.labelFilters[0].selector.matchExpressions[0].key=k", "picker.config.labelFilters[0].selector.matchExpressions[0].operator=In"},
			want: []string{"labelFilters", "matchExpressions", "values"},
		},
		"a prefill selector's NotIn without values": {
			sets: []string{"picker.config.disaggregation.prefillLabelFilters[0].selector.matchExpressions[0].key=k", "picker.config.disaggregation.prefillLabelFilters[0].selector.matchExpressions[0].operator=NotIn"},
			want: []string{"prefillLabelFilters", "matchExpressions", "values"},
		},
		"a selector's Exists with values": {
			sets: []string{"picker.config.labelFilters[0].selector.matchExpressions[0].key=k", "picker.config.labelFilters[0].selector.matchExpressions[0].operator=Exists", "picker.config.labelFilters[0].selector.matchExpressions[0].values[0]=a"},
			want: []string{"labelFilters", "matchExpressions", "values", "maxItems"},
		},
		"a prefillPods the picker does not know": {
			sets: []string{"picker.config.disaggregation.prefillPods=any"},
			want: []string{"prefillPods"},
		},
		"an encode stage the picker does not know": {
			sets: []string{"picker.config.disaggregation.encode=always"},
			want: []string{"disaggregation", "encode"},
		},
		"a negative contextLengthWeight": {
			sets: []string{"picker.config.weightedScorer.contextLengthWeight=-1"},
			want: []string{"contextLengthWeight", "minimum"},
		},
		"a negative minUncachedTokens": {
			sets: []string{"picker.config.disaggregation.minUncachedTokens=-1"},
			want: []string{"disaggregation", "minUncachedTokens", "minimum"},
		},
		"a fractional minUncachedTokens": {
			sets: []string{"picker.config.disaggregation.minUncachedTokens=1.5"},
			want: []string{"disaggregation", "minUncachedTokens", "integer"},
		},
		"zero replicas": {
			sets: []string{"replicas=0"},
			want: []string{"replicas", "minimum"},
		},
		"unknown failure mode": {
			sets: []string{"pool.failureMode=FailSometimes"},
			want: []string{"failureMode", "FailClose", "FailOpen"},
		},
		"unknown provider": {
			sets: []string{"provider.name=aws"},
			want: []string{"provider", "gke", "istio"},
		},
		"spread constraint without topology key": {
			sets: []string{"topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule"},
			want: []string{"topologySpreadConstraints", "topologyKey"},
		},
		"misspelled key": {
			sets: []string{"pool.targetPort=8000"},
			want: []string{"targetPort", "additional properties"},
		},
		"port out of range": {
			sets: []string{"pool.targetPorts={8000,70000}"},
			want: []string{"targetPorts", "maximum"},
		},
		"duplicate ports": {
			sets: []string{"pool.targetPorts={8000,8000}"},
			want: []string{"targetPorts", "equal"},
		},
		"route without gateway": {
			sets: []string{"httpRoute.enabled=true"},
			want: []string{"httpRoute", "gateway", "name"},
		},
		"unknown policy": {
			sets: []string{"picker.config.name=fastest"},
			want: []string{"picker", "config", "name", "cache-aware"},
		},
		"misspelled policy field": {
			sets: []string{"picker.config.cacheAware.matchThreshhold=0.5"},
			want: []string{"cacheAware", "matchThreshhold", "additional properties"},
		},
		"bad duration": {
			sets: []string{"picker.refreshMetricsInterval=fast"},
			want: []string{"refreshMetricsInterval"},
		},
		"kv events port out of range": {
			sets: []string{"picker.kvEvents.port=70000"},
			want: []string{"kvEvents", "port", "maximum"},
		},
		"kv events listen port out of range": {
			sets: []string{"picker.kvEvents.listenPort=70000"},
			want: []string{"kvEvents", "listenPort", "maximum"},
		},
		"kv events replay port out of range": {
			sets: []string{"picker.kvEvents.replayPort=-1"},
			want: []string{"kvEvents", "replayPort", "minimum"},
		},
		"bad replay timeout": {
			sets: []string{"picker.kvEvents.replayTimeout=2"},
			want: []string{"kvEvents", "replayTimeout"},
		},
		"offload weight past 1": {
			sets: []string{"picker.kvEvents.offloadWeight=2"},
			want: []string{"kvEvents", "offloadWeight"},
		},
		"bad tokenize timeout": {
			sets: []string{"picker.kvEvents.tokenizeTimeout=soon"},
			want: []string{"kvEvents", "tokenizeTimeout"},
		},
		// The picker refuses each of these at start (must be positive).
		"a metrics refresh of zero": {
			sets: []string{"picker.refreshMetricsInterval=0s"},
			want: []string{"refreshMetricsInterval"},
		},
		"a keepalive time of zero": {
			sets: []string{"picker.keepalive.time=0m"},
			want: []string{"keepalive", "time"},
		},
		"a keepalive timeout of zero": {
			sets: []string{"picker.keepalive.timeout=0ms"},
			want: []string{"keepalive", "timeout"},
		},
		"a replay timeout of zero": {
			sets: []string{"picker.kvEvents.port=5557", "picker.kvEvents.replayPort=5558", "picker.kvEvents.replayTimeout=0s"},
			want: []string{"kvEvents", "replayTimeout"},
		},
		"a tokenize timeout of zero": {
			sets: []string{"picker.kvEvents.port=5557", "picker.kvEvents.tokenizeTimeout=0.0s"},
			want: []string{"kvEvents", "tokenizeTimeout"},
		},
		// The API server refuses these in a PodDisruptionBudget.
		"a negative disruption budget": {
			sets: []string{"podDisruptionBudget.enabled=true", "replicas=3", "podDisruptionBudget.minAvailable=-1"},
			want: []string{"podDisruptionBudget", "minAvailable"},
		},
		"a disruption budget that is no percentage": {
			sets: []string{"podDisruptionBudget.enabled=true", "replicas=3", "podDisruptionBudget.maxUnavailable=half"},
			want: []string{"podDisruptionBudget", "maxUnavailable"},
		},
		"a disruption budget over 100%": {
			sets: []string{"podDisruptionBudget.enabled=true", "replicas=3", "podDisruptionBudget.minAvailable=150%"},
			want: []string{"podDisruptionBudget", "minAvailable"},
		},
		// The picker refuses --kv-events-replay-port without
		// --kv-events-port; the chart would leave the replay out unsaid.
		"a replay port without the events port": {
			sets: []string{"picker.kvEvents.replayPort=5558"},
			want: []string{"kvEvents", "port"},
		},
		"bad keepalive": {
			sets: []string{"picker.keepalive.time=often"},
			want: []string{"keepalive", "time"},
		},
		"network policy peer typo": {
			sets: []string{"networkPolicy.metricsFrom[0].namespaceSelectr.matchLabels.a=b"},
			want: []string{"namespaceSelectr", "additional properties"},
		},
		"client certificates over plaintext": {
			sets: []string{"tls.enabled=false", "tls.clientCASecretName=gateway-client-ca"},
			want: []string{"/tls/enabled", "must be true"},
		},
		"empty selector": {
			sets: []string{"pool.selector.matchLabels=null"},
			want: []string{"matchLabels"},
		},
		// Names the API server would refuse are refused before anything is
		// installed, naming the value.
		"full name with capitals": {
			sets: []string{"fullnameOverride=Llama_Picker"},
			want: []string{"fullnameOverride", "pattern"},
		},
		"name with a dot": {
			sets: []string{"nameOverride=pick.er"},
			want: []string{"nameOverride", "pattern"},
		},
		"service account with capitals": {
			sets: []string{"serviceAccount.name=Picker"},
			want: []string{"serviceAccount", "name", "pattern"},
		},
		"TLS secret with an underscore": {
			sets: []string{"tls.secretName=picker_tls"},
			want: []string{"tls", "secretName", "pattern"},
		},
		"route hostname with a port": {
			sets: []string{"httpRoute.enabled=true", "httpRoute.gateway.name=gw", "httpRoute.hostnames={llm.example.com:443}"},
			want: []string{"hostnames", "pattern"},
		},
		"route hostname with capitals": {
			sets: []string{"httpRoute.enabled=true", "httpRoute.gateway.name=gw", "httpRoute.hostnames={LLM.example.com}"},
			want: []string{"hostnames", "pattern"},
		},
		// The load balancer's types are upper case: a lower-case one is
		// refused with the list of those it has.
		"a GKE health check type the load balancer has not": {
			sets: []string{"provider.name=gke", "provider.gke.healthCheckType=grpc"},
			want: []string{"/provider/gke/healthCheckType", "must be one of"},
		},
		"gateway namespace with a dot": {
			sets: []string{"httpRoute.enabled=true", "httpRoute.gateway.name=gw", "httpRoute.gateway.namespace=infra.gw"},
			want: []string{"gateway", "namespace", "pattern"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, errOut, err := render(t, nil, tc.sets...)
			if err == nil {
				t.Fatalf("helm template accepted %v; rendered:\n%s", tc.sets, out)
			}
			if !strings.Contains(errOut, "values don't meet the specifications of the schema") {
				t.Errorf("error is not a schema violation:\n%s", errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("error does not mention %q:\n%s", w, errOut)
				}
			}
		})
	}
}

// TestExtraArgsTheChartSets checks that picker.extraArgs may not set a flag
// the chart sets from its own values: the probes, the Service, the RBAC and
// the grace period follow the chart's value, and a second one after it would
// win and leave them pointing elsewhere; a flag rendered from a value of
// picker would win as silently, and the error names that value.
func TestExtraArgsTheChartSets(t *testing.T) {
	tests := map[string]struct {
		args string
		sets []string
		want []string
	}{
		"health port":       {args: "--grpc-health-port=9100", want: []string{"--grpc-health-port", "9003"}},
		"drain":             {args: "--extproc-transport=grpc,--drain-timeout=300s", want: []string{"--drain-timeout", "picker.drainTimeoutSeconds"}},
		"pool":              {args: "-pool-name=other", want: []string{"--pool-name", "pool.name"}},
		"ha mode":           {args: "--ha-mode=active-passive", want: []string{"--ha-mode", "haMode"}},
		"bare flag":         {args: "--secure-serving", want: []string{"--secure-serving", "tls.enabled"}},
		"ext_proc port":     {args: "--grpc-port=9000", want: []string{"--grpc-port", "service.grpcPort"}},
		"fallbacks":         {args: "--fallbacks=5", want: []string{"the chart sets --fallbacks from picker.fallbacks", "Set picker.fallbacks instead"}},
		"verbosity":         {args: "-v=4", want: []string{"--v from picker.verbosity", "Set picker.verbosity instead"}},
		"model server type": {args: "--model-server-type=sglang", want: []string{"Set picker.modelServerType instead"}},
		"policy, when set": {args: "--policy=random", sets: []string{"picker.policy=least-load"},
			want: []string{"Set picker.policy instead"}},
		"KV events topic, when on": {args: "--kv-events-topic=kv@", sets: []string{"picker.kvEvents.port=5557", "picker.kvEvents.topic=kv"},
			want: []string{"Set picker.kvEvents.topic instead"}},
		"flow control bound, when on": {args: "--flow-control-max-wait=5s", sets: []string{"picker.flowControl.enabled=true"},
			want: []string{"Set picker.flowControl.maxWait instead"}},
		"flow control ordering, when on": {args: "--flow-control-ordering=slo-deadline", sets: []string{"picker.flowControl.enabled=true"},
			want: []string{"the chart sets --flow-control-ordering from picker.flowControl.ordering", "Set picker.flowControl.ordering instead"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, errOut, err := render(t, nil, append(tc.sets, "picker.extraArgs={"+tc.args+"}")...)
			if err == nil {
				t.Fatalf("helm template accepted picker.extraArgs %s", tc.args)
			}
			for _, w := range append([]string{"picker.extraArgs"}, tc.want...) {
				if !strings.Contains(errOut, w) {
					t.Errorf("error does not mention %q:\n%s", w, errOut)
				}
			}
		})
	}
	// A flag the chart renders only from a value that is not set is the
	// extra args' to give.
	t.Run("other flags", func(t *testing.T) {
		extra := "--policy=random,--model-server-metrics-port=9400,--kv-events-topic=kv@,--flow-control-max-wait=5s,--extproc-transport=grpc"
		out, errOut, err := render(t, nil, "picker.extraArgs={"+extra+"}")
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, errOut)
		}
		args := pickerArgs(t, parseManifest(t, out))
		for _, a := range strings.Split(extra, ",") {
			if !slices.Contains(args, a) {
				t.Errorf("picker args %q lack the extra arg %s", args, a)
			}
		}
	})
}

// TestKVEventsPortTheContainerUses checks that picker.kvEvents.listenPort
// may not be a port the picker's container already listens on, where the
// picker would fail to start.
func TestKVEventsPortTheContainerUses(t *testing.T) {
	for port, name := range map[string]string{"9002": "ext_proc", "9003": "health", "9090": "metrics"} {
		t.Run(name, func(t *testing.T) {
			renderUnless(t, "picker.kvEvents.listenPort: "+port+" is the picker's "+name+" port", "picker.kvEvents.listenPort="+port)
		})
	}
	renderUnless(t, "", "picker.kvEvents.listenPort=5557")
}

// TestTLSSecretWithoutTLS checks that tls.secretName with tls.enabled false
// fails the render: the picker would serve plaintext, the Secret unused.
func TestTLSSecretWithoutTLS(t *testing.T) {
	renderUnless(t, "tls.secretName picker-tls is set with tls.enabled false: ext_proc is then served in plaintext and the Secret is not used. Set tls.enabled true",
		"tls.enabled=false", "tls.secretName=picker-tls")
	out, _ := renderUnless(t, "", "tls.secretName=picker-tls")
	if args := pickerArgs(t, parseManifest(t, out)); !slices.Contains(args, "--cert-path=/etc/inferpick/tls") {
		t.Errorf("picker args %q lack --cert-path with tls.enabled and tls.secretName", args)
	}
	renderUnless(t, "", "tls.enabled=false")
}

// TestPoolSelector checks the pool's selector without the tests' base values:
// a release that creates a pool must name its pods' labels, the labels given
// are the whole selector, and a release serving an existing pool needs none.
func TestPoolSelector(t *testing.T) {
	t.Run("none given", func(t *testing.T) {
		out, errOut, err := template(t)
		if err == nil {
			t.Fatalf("helm template made a pool without a selector:\n%s", out)
		}
		for _, w := range []string{"values don't meet the specifications of the schema", "/pool/selector/matchLabels", "minProperties"} {
			if !strings.Contains(errOut, w) {
				t.Errorf("error does not mention %q:\n%s", w, errOut)
			}
		}
	})
	t.Run("other labels", func(t *testing.T) {
		out, errOut, err := template(t, "--set-string", "pool.selector.matchLabels.llm-d\\.ai/inferenceServing=true")
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, errOut)
		}
		var pool inferencev1.InferencePool
		if !parseManifest(t, out).decode(t, "InferencePool", &pool) {
			t.Fatal("no InferencePool")
		}
		want := map[inferencev1.LabelKey]inferencev1.LabelValue{"llm-d.ai/inferenceServing": "true"}
		if diff := cmp.Diff(want, pool.Spec.Selector.MatchLabels); diff != "" {
			t.Errorf("pool selector (-want +got):\n%s", diff)
		}
	})
	t.Run("existing pool", func(t *testing.T) {
		out, errOut, err := template(t, "--set", "pool.create=false", "--set", "pool.name=shared")
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, errOut)
		}
		if k := parseManifest(t, out).kinds(); slices.ContainsFunc(k, func(s string) bool { return strings.HasPrefix(s, "InferencePool/") }) {
			t.Errorf("an InferencePool rendered for an existing pool: %v", k)
		}
	})
	// A pool is named as any object is (a DNS subdomain): the upstream chart
	// names its pool after a release such as llama-3.1-8b.
	t.Run("existing pool named with dots", func(t *testing.T) {
		out, errOut, err := template(t, "--set", "pool.create=false", "--set", "pool.name=llama-3.1-8b", "--set", "replicas=2")
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, errOut)
		}
		m := parseManifest(t, out)
		if args := pickerArgs(t, m); !slices.Contains(args, "--pool-name=llama-3.1-8b") {
			t.Errorf("picker args %q lack --pool-name=llama-3.1-8b", args)
		}
		lease := decodeAll[rbacv1.Role](t, m, "Role")["llama-inferpick-leader-election"]
		if lease == nil || !slices.ContainsFunc(lease.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.ResourceNames, "inferpick-llama-3.1-8b")
		}) {
			t.Errorf("no leader-election Role for the Lease inferpick-llama-3.1-8b: %+v", lease)
		}
	})
}

// TestCRDCopy checks that the chart installs exactly the CRD generated from
// api/v1.
func TestCRDCopy(t *testing.T) {
	const file = "inference.networking.k8s.io_inferencepools.yaml"
	generated, err := os.ReadFile(filepath.Join(repoRoot, "config", "crd", "bases", file))
	if err != nil {
		t.Fatal(err)
	}
	inChart, err := os.ReadFile(filepath.Join(chartDir, "crds", file))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(generated), string(inChart)); diff != "" {
		t.Errorf("charts/inferpick/crds/%s differs from config/crd/bases (-want +got); run `make chart-crds`:\n%s", file, diff)
	}
}

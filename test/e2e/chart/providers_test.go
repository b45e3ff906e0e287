package chart

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
)

// field reads a nested field of a rendered object, failing when it is absent.
func field(t *testing.T, u *unstructured.Unstructured, path ...string) any {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if err != nil || !ok {
		t.Fatalf("%s %s has no %s (%v)", u.GetKind(), u.GetName(), strings.Join(path, "."), err)
	}
	return v
}

// only returns the one rendered object of kind.
func (m manifest) only(t *testing.T, kind string) *unstructured.Unstructured {
	t.Helper()
	var found *unstructured.Unstructured
	for _, u := range m.docs {
		if u.GetKind() == kind {
			if found != nil {
				t.Fatalf("more than one %s", kind)
			}
			found = u
		}
	}
	if found == nil {
		t.Fatalf("no %s rendered", kind)
	}
	return found
}

// TestScrapeToken checks that the scrape objects present a token from a
// Secret the cluster fills for a ServiceAccount allowed to read /metrics,
// never a token file of the scraper's own.
func TestScrapeToken(t *testing.T) {
	for name, scrape := range map[string]struct {
		values []string
		kind   string
		path   []string // to the Secret's name in the first endpoint
	}{
		"ServiceMonitor": {[]string{"istio.yaml"}, "ServiceMonitor", []string{"authorization", "credentials", "name"}},
		"PodMonitoring":  {[]string{"gke.yaml"}, "PodMonitoring", []string{"authorization", "credentials", "secret", "name"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, errOut, err := render(t, scrape.values)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			if strings.Contains(out, "bearerTokenFile") {
				t.Error("rendered a bearerTokenFile")
			}
			m := parseManifest(t, out)
			endpoints := field(t, m.only(t, scrape.kind), "spec", "endpoints").([]any)
			ep := &unstructured.Unstructured{Object: endpoints[0].(map[string]any)}
			secretName := field(t, ep, scrape.path...)

			var secret corev1.Secret
			if !m.decode(t, "Secret", &secret) {
				t.Fatal("no token Secret rendered")
			}
			if secret.Name != secretName || secret.Type != corev1.SecretTypeServiceAccountToken {
				t.Fatalf("%s reads Secret %v; rendered Secret %s of type %s", scrape.kind, secretName, secret.Name, secret.Type)
			}
			sa := secret.Annotations[corev1.ServiceAccountNameKey]
			bindings := decodeAll[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding")
			b := bindings["serving-llama-inferpick-metrics-reader"]
			if b == nil {
				t.Fatal("no binding of the metrics-reader ClusterRole")
			}
			want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: namespace}}
			if diff := cmp.Diff(want, b.Subjects); diff != "" {
				t.Errorf("metrics-reader subjects (-want +got):\n%s", diff)
			}
		})
	}
}

// TestScrapeTimeoutWithinInterval checks that the scrape objects never ask
// for a timeout longer than their interval, which Prometheus refuses (and
// with it every target of the object): a shorter interval shortens the
// timeout with it.
func TestScrapeTimeoutWithinInterval(t *testing.T) {
	scrapes := map[string]struct {
		values  []string
		kind    string
		timeout string // the endpoint's timeout field
	}{
		"ServiceMonitor": {[]string{"istio.yaml"}, "ServiceMonitor", "scrapeTimeout"},
		"PodMonitoring":  {[]string{"gke.yaml"}, "PodMonitoring", "timeout"},
	}
	tests := map[string]struct {
		interval, timeout string
		want              time.Duration
	}{
		"default timeout under a short interval": {interval: "5s", want: 5 * time.Second},
		"timeout longer than the interval":       {interval: "1m", timeout: "90s", want: time.Minute},
		"timeout within the interval":            {interval: "1m", timeout: "10s", want: 10 * time.Second},
		"sub-second interval":                    {interval: "500ms", timeout: "1s", want: 500 * time.Millisecond},
	}
	for name, scrape := range scrapes {
		for tname, tc := range tests {
			t.Run(name+"/"+tname, func(t *testing.T) {
				sets := []string{"metrics.serviceMonitor.interval=" + tc.interval}
				if tc.timeout != "" {
					sets = append(sets, "metrics.serviceMonitor.scrapeTimeout="+tc.timeout)
				}
				out, errOut, err := render(t, scrape.values, sets...)
				if err != nil {
					t.Fatalf("helm template: %v\n%s", err, errOut)
				}
				endpoints := field(t, parseManifest(t, out).only(t, scrape.kind), "spec", "endpoints").([]any)
				ep := &unstructured.Unstructured{Object: endpoints[0].(map[string]any)}
				got, err := time.ParseDuration(fmt.Sprint(field(t, ep, scrape.timeout)))
				if err != nil {
					t.Fatalf("%s %s: %v", scrape.kind, scrape.timeout, err)
				}
				if got != tc.want {
					t.Errorf("%s %s %v under interval %s, want %v", scrape.kind, scrape.timeout, got, tc.interval, tc.want)
				}
			})
		}
	}
}

// TestProviderObjects checks what the gateway-specific objects point at.
func TestProviderObjects(t *testing.T) {
	t.Run("gke", func(t *testing.T) {
		out, errOut, err := render(t, []string{"gke.yaml"})
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, errOut)
		}
		m := parseManifest(t, out)
		for _, kind := range []string{"HealthCheckPolicy", "GCPBackendPolicy"} {
			ref := field(t, m.only(t, kind), "spec", "targetRef")
			want := map[string]any{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llama"}
			if diff := cmp.Diff(want, ref); diff != "" {
				t.Errorf("%s targetRef (-want +got):\n%s", kind, diff)
			}
		}
		// An h2c pool's servers speak gRPC only: the load balancer asks
		// the standard gRPC health service on the first target port.
		hc := m.only(t, "HealthCheckPolicy")
		want := map[string]any{
			"type": "GRPC",
			"grpcHealthCheck": map[string]any{
				"portSpecification": "USE_FIXED_PORT",
				"port":              float64(8000),
				"grpcServiceName":   "vllm.grpc.engine.VllmEngine",
			},
		}
		if diff := cmp.Diff(want, field(t, hc, "spec", "default", "config")); diff != "" {
			t.Errorf("health check of an h2c pool (-want +got):\n%s", diff)
		}
	})
	// provider.gke.healthCheckType picks the check; auto follows the pool's
	// protocol. A gRPC server without the standard health service is
	// checked by TCP, keeping the chart's other GKE objects.
	t.Run("gke health check type", func(t *testing.T) {
		// fixed is a check of type kind on the first target port, in its
		// block named after the type (grpcHealthCheck, tcpHealthCheck, ...).
		fixed := func(kind string, fields map[string]any) map[string]any {
			check := map[string]any{"port": float64(8000)}
			maps.Copy(check, fields)
			return map[string]any{"type": kind, strings.ToLower(kind) + "HealthCheck": check}
		}
		grpcCheck := fixed("GRPC", map[string]any{"portSpecification": "USE_FIXED_PORT", "grpcServiceName": "vllm.grpc.engine.VllmEngine"})
		httpCheck := fixed("HTTP", map[string]any{"requestPath": "/health"})
		tests := map[string]struct {
			sets []string
			want map[string]any
		}{
			"auto on an http pool": {want: httpCheck},
			"auto on an h2c pool":  {sets: []string{"pool.appProtocol=kubernetes.io/h2c"}, want: grpcCheck},
			"HTTP on an h2c pool":  {sets: []string{"pool.appProtocol=kubernetes.io/h2c", "provider.gke.healthCheckType=HTTP"}, want: httpCheck},
			"HTTP2 with its path":  {sets: []string{"provider.gke.healthCheckType=HTTP2", "provider.gke.healthCheckPath=/ping"}, want: fixed("HTTP2", map[string]any{"requestPath": "/ping"})},
			"GRPC on an http pool": {sets: []string{"provider.gke.healthCheckType=GRPC"}, want: grpcCheck},
			"GRPC of the whole server": {
				sets: []string{"pool.appProtocol=kubernetes.io/h2c", "provider.gke.healthCheckType=GRPC", "provider.gke.grpcServiceName="},
				want: fixed("GRPC", map[string]any{"portSpecification": "USE_FIXED_PORT"}),
			},
			"TCP on an h2c pool": {
				sets: []string{"pool.appProtocol=kubernetes.io/h2c", "provider.gke.healthCheckType=TCP"},
				want: fixed("TCP", map[string]any{"portSpecification": "USE_FIXED_PORT"}),
			},
		}
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				out, errOut, err := render(t, nil, append([]string{"provider.name=gke"}, tc.sets...)...)
				if err != nil {
					t.Fatalf("helm template: %v\n%s", err, errOut)
				}
				m := parseManifest(t, out)
				if diff := cmp.Diff(tc.want, field(t, m.only(t, "HealthCheckPolicy"), "spec", "default", "config")); diff != "" {
					t.Errorf("health check (-want +got):\n%s", diff)
				}
				m.only(t, "GCPBackendPolicy")
				m.only(t, "PodMonitoring")
			})
		}
	})
	t.Run("istio", func(t *testing.T) {
		out, errOut, err := render(t, []string{"istio.yaml"})
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, errOut)
		}
		m := parseManifest(t, out)
		dr := m.only(t, "DestinationRule")
		if got := field(t, dr, "spec", "host"); got != "llama-inferpick.serving.svc.cluster.local" {
			t.Errorf("host %v, want the picker Service", got)
		}
		tls := field(t, dr, "spec", "trafficPolicy", "tls")
		if diff := cmp.Diff(map[string]any{"mode": "SIMPLE", "insecureSkipVerify": true}, tls); diff != "" {
			t.Errorf("tls to the self-signed picker (-want +got):\n%s", diff)
		}
		field(t, dr, "spec", "trafficPolicy", "connectionPool", "http", "maxRequestsPerConnection")

		var dep appsv1.Deployment
		m.decode(t, "Deployment", &dep)
		spec := dep.Spec.Template.Spec
		if spec.PriorityClassName != "system-cluster-critical" || len(spec.TopologySpreadConstraints) != 1 ||
			dep.Spec.Template.Labels["team"] != "serving" || dep.Spec.Template.Annotations["example.com/owner"] != "serving" {
			t.Errorf("pod template lacks the priority class, spread constraint, labels or annotations:\n%+v", dep.Spec.Template)
		}
	})
	// Istio names a Service <name>.<namespace>.svc.<its domain suffix>, the
	// cluster's domain; a host under another domain matches no Service, and
	// the DestinationRule's TLS never applies.
	t.Run("istio in a cluster of another domain", func(t *testing.T) {
		out, errOut, err := render(t, nil, "provider.name=istio", "clusterDomain=corp.local")
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, errOut)
		}
		if got := field(t, parseManifest(t, out).only(t, "DestinationRule"), "spec", "host"); got != "llama-inferpick.serving.svc.corp.local" {
			t.Errorf("host %v, want the picker Service in the domain corp.local", got)
		}
	})
	t.Run("istio without TLS", func(t *testing.T) {
		out, errOut, err := render(t, nil, "provider.name=istio", "tls.enabled=false")
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, errOut)
		}
		if _, ok, _ := unstructured.NestedFieldNoCopy(parseManifest(t, out).only(t, "DestinationRule").Object, "spec", "trafficPolicy", "tls"); ok {
			t.Error("TLS origination to a plaintext picker")
		}
	})
	// The rendered SIMPLE mode presents no client certificate, which a
	// picker asking for one refuses on every connection.
	t.Run("istio with client certificates", func(t *testing.T) {
		_, errOut, err := render(t, nil, "provider.name=istio", "tls.clientCASecretName=gateway-client-ca")
		if err == nil || !strings.Contains(errOut, "provider.istio.destinationRule.trafficPolicy.tls") {
			t.Fatalf("rendered (err %v), want a failure naming provider.istio.destinationRule.trafficPolicy.tls:\n%s", err, errOut)
		}
		out, errOut, err := render(t, nil, "provider.name=istio", "tls.clientCASecretName=gateway-client-ca",
			"provider.istio.destinationRule.trafficPolicy.tls.mode=MUTUAL",
			"provider.istio.destinationRule.trafficPolicy.tls.credentialName=gateway-client-cert")
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, errOut)
		}
		tls := field(t, parseManifest(t, out).only(t, "DestinationRule"), "spec", "trafficPolicy", "tls")
		if diff := cmp.Diff(map[string]any{"mode": "MUTUAL", "credentialName": "gateway-client-cert"}, tls); diff != "" {
			t.Errorf("tls with the gateway's client certificate (-want +got):\n%s", diff)
		}
	})
}

// TestStrategy checks that every strategy the chart renders can finish a
// rollout: in active-active mode every pod becomes ready, in active-passive
// mode only one.
func TestStrategy(t *testing.T) {
	tests := map[string]struct {
		sets     []string
		want     appsv1.DeploymentStrategyType
		wantFail string
	}{
		"one replica": {want: appsv1.RollingUpdateDeploymentStrategyType},
		"active-active replicas": {
			sets: []string{"replicas=3"},
			want: appsv1.RollingUpdateDeploymentStrategyType,
		},
		"active-active rolling update with one unavailable": {
			sets: []string{"replicas=3", "strategy.type=RollingUpdate", "strategy.rollingUpdate.maxUnavailable=1"},
			want: appsv1.RollingUpdateDeploymentStrategyType,
		},
		"active-passive replicas": {
			sets: []string{"replicas=3", "haMode=active-passive"},
			want: appsv1.RecreateDeploymentStrategyType,
		},
		"active-passive rolling update that waits for standbys": {
			sets:     []string{"replicas=3", "haMode=active-passive", "strategy.type=RollingUpdate"},
			wantFail: "maxUnavailable to at least 3",
		},
		"active-passive rolling update with one unavailable": {
			sets:     []string{"replicas=3", "haMode=active-passive", "strategy.type=RollingUpdate", "strategy.rollingUpdate.maxUnavailable=1"},
			wantFail: "never finishes",
		},
		// The old leader stays ready and the new standbys never do, so the
		// rollout never takes the leader down.
		"active-passive rolling update that keeps the old leader": {
			sets:     []string{"replicas=3", "haMode=active-passive", "strategy.type=RollingUpdate", "strategy.rollingUpdate.maxUnavailable=2"},
			wantFail: "maxUnavailable to at least 3",
		},
		"active-passive rolling update that may take every pod down": {
			sets: []string{"replicas=3", "haMode=active-passive", "strategy.type=RollingUpdate", "strategy.rollingUpdate.maxUnavailable=3"},
			want: appsv1.RollingUpdateDeploymentStrategyType,
		},
		"active-passive percentage that keeps the old leader": {
			sets:     []string{"replicas=4", "haMode=active-passive", "strategy.type=RollingUpdate", "strategy.rollingUpdate.maxUnavailable=75%"},
			wantFail: "maxUnavailable to at least 4",
		},
		"active-passive percentage": {
			sets: []string{"replicas=4", "haMode=active-passive", "strategy.type=RollingUpdate", "strategy.rollingUpdate.maxUnavailable=100%"},
			want: appsv1.RollingUpdateDeploymentStrategyType,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, ok := renderUnless(t, tc.wantFail, tc.sets...)
			if !ok {
				return
			}
			var dep appsv1.Deployment
			parseManifest(t, out).decode(t, "Deployment", &dep)
			if dep.Spec.Strategy.Type != tc.want {
				t.Errorf("strategy %s, want %s", dep.Spec.Strategy.Type, tc.want)
			}
			drain, sleep := 115, 5
			if dep.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType || strings.Contains(strings.Join(tc.sets, " "), "haMode=active-passive") {
				sleep = 0 // an active-passive leader: see TestPreStopSleep
			}
			if got := dep.Spec.Template.Spec.TerminationGracePeriodSeconds; got == nil || *got != int64(sleep+drain+15) {
				t.Errorf("terminationGracePeriodSeconds %v, want the preStop sleep %d s + the drain timeout %d s + 15 s", got, sleep, drain)
			}
		})
	}
}

// TestDisruptionBudget checks that the PodDisruptionBudget the chart renders
// lets a node drain evict a ready picker: one that counts on every replica
// staying up would hold every drain of a picker's node until someone deletes
// the pod.
func TestDisruptionBudget(t *testing.T) {
	tests := map[string]struct {
		sets     []string
		want     policyv1.PodDisruptionBudgetSpec
		wantFail string
	}{
		"two replicas": {
			sets: []string{"replicas=2"},
			want: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1))},
		},
		"one replica": {
			wantFail: "podDisruptionBudget: with 1 replica",
		},
		"every replica available": {
			sets:     []string{"replicas=3", "podDisruptionBudget.minAvailable=100%"},
			wantFail: "podDisruptionBudget: with 3 replicas",
		},
		"half of two replicas": {
			sets: []string{"replicas=2", "podDisruptionBudget.minAvailable=50%"},
			want: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromString("50%"))},
		},
		"one unavailable": {
			sets: []string{"replicas=3", "podDisruptionBudget.maxUnavailable=1"},
			want: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		},
		"one unavailable of one replica": {
			sets: []string{"podDisruptionBudget.maxUnavailable=1"},
			want: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		},
		"none unavailable": {
			sets:     []string{"replicas=3", "podDisruptionBudget.maxUnavailable=0"},
			wantFail: "maxUnavailable 0",
		},
		// Only the leader is ready: a budget keeping one ready picker, or
		// leaving one of two unavailable, keeps the leader from eviction.
		"two replicas in active-passive mode": {
			sets:     []string{"replicas=2", "haMode=active-passive"},
			wantFail: "only the leader of the 2 replicas is ready",
		},
		"one unavailable of two in active-passive mode": {
			sets:     []string{"replicas=2", "haMode=active-passive", "podDisruptionBudget.maxUnavailable=1"},
			wantFail: "only the leader of the 2 replicas is ready",
		},
		"every replica unavailable in active-passive mode": {
			sets: []string{"replicas=2", "haMode=active-passive", "podDisruptionBudget.maxUnavailable=100%"},
			want: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromString("100%"))},
		},
		"none unavailable in percent": {
			sets:     []string{"replicas=3", "podDisruptionBudget.maxUnavailable=0%"},
			wantFail: "maxUnavailable 0%",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, ok := renderUnless(t, tc.wantFail, append([]string{"podDisruptionBudget.enabled=true"}, tc.sets...)...)
			if !ok {
				return
			}
			var pdb policyv1.PodDisruptionBudget
			if !parseManifest(t, out).decode(t, "PodDisruptionBudget", &pdb) {
				t.Fatal("no PodDisruptionBudget")
			}
			got := policyv1.PodDisruptionBudgetSpec{MinAvailable: pdb.Spec.MinAvailable, MaxUnavailable: pdb.Spec.MaxUnavailable}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("disruption budget (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFailureModeDefault checks that a new pool fails open, as the upstream
// chart's does, unless the values say otherwise. (Keeping an existing pool's
// mode needs a cluster: the end-to-end upgrade test covers it.)
func TestFailureModeDefault(t *testing.T) {
	for sets, want := range map[string]inferencev1.EndpointPickerFailureMode{
		"":                           inferencev1.EndpointPickerFailOpen,
		"pool.failureMode=FailClose": inferencev1.EndpointPickerFailClose,
	} {
		var args []string
		if sets != "" {
			args = append(args, sets)
		}
		out, errOut, err := render(t, nil, args...)
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, errOut)
		}
		var pool inferencev1.InferencePool
		parseManifest(t, out).decode(t, "InferencePool", &pool)
		if got := pool.Spec.EndpointPickerRef.FailureMode; got != want {
			t.Errorf("--set %q: failureMode %s, want %s", sets, got, want)
		}
	}
}

// TestPreStopSleep checks that a stopping picker serves on while gateways
// see its endpoint go, where the cluster runs the sleep action, and that the
// grace period makes room for the sleep before the drain.
func TestPreStopSleep(t *testing.T) {
	tests := map[string]struct {
		kubeVersion string
		sets        []string
		wantSleep   int64 // 0: no preStop hook
		wantGrace   int64
	}{
		"default":                          {kubeVersion: kubeVersion, wantSleep: 5, wantGrace: 135},
		"Kubernetes 1.30":                  {kubeVersion: "1.30.0", wantSleep: 5, wantGrace: 135},
		"Kubernetes 1.29, no sleep action": {kubeVersion: "1.29.9", wantGrace: 130},
		"turned off":                       {kubeVersion: kubeVersion, sets: []string{"picker.preStopSleepSeconds=0"}, wantGrace: 130},
		// The leader gives its lease up at SIGTERM: a sleep before it
		// would leave no replica ready that much longer.
		"active-passive, no sleep": {
			kubeVersion: kubeVersion, sets: []string{"replicas=3", "haMode=active-passive"}, wantGrace: 130,
		},
		"active-active replicas sleep": {
			kubeVersion: kubeVersion, sets: []string{"replicas=3"}, wantSleep: 5, wantGrace: 135,
		},
		"longer, with a longer drain": {
			kubeVersion: kubeVersion, sets: []string{"picker.preStopSleepSeconds=20", "picker.drainTimeoutSeconds=300"},
			wantSleep: 20, wantGrace: 335,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, errOut, err := templateAs(t, release, namespace, tc.kubeVersion, valuesArgs(nil, tc.sets...)...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			var dep appsv1.Deployment
			parseManifest(t, out).decode(t, "Deployment", &dep)
			spec := dep.Spec.Template.Spec
			if got := spec.TerminationGracePeriodSeconds; got == nil || *got != tc.wantGrace {
				t.Errorf("terminationGracePeriodSeconds %v, want %d", got, tc.wantGrace)
			}
			var sleep int64
			if lc := spec.Containers[0].Lifecycle; lc != nil && lc.PreStop != nil && lc.PreStop.Sleep != nil {
				sleep = lc.PreStop.Sleep.Seconds
			}
			if sleep != tc.wantSleep {
				t.Errorf("preStop sleep %d s, want %d s (lifecycle %+v)", sleep, tc.wantSleep, spec.Containers[0].Lifecycle)
			}
		})
	}
}

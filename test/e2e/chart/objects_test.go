package chart

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	"github.com/inferpick/inferpick/picker/policy"
)

// manifest is one rendered chart, split into objects.
type manifest struct {
	docs []*unstructured.Unstructured
}

// parseManifest splits helm's output into objects, skipping empty documents.
func parseManifest(t *testing.T, out string) manifest {
	t.Helper()
	var m manifest
	for doc := range strings.SplitSeq(out, "\n---\n") {
		doc = strings.TrimPrefix(doc, "---\n")
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, doc)
		}
		m.docs = append(m.docs, u)
	}
	return m
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// kinds lists the objects as Kind/name, sorted.
func (m manifest) kinds() []string {
	var ks []string
	for _, u := range m.docs {
		ks = append(ks, u.GetKind()+"/"+u.GetName())
	}
	slices.Sort(ks)
	return ks
}

// decode finds the only object of kind and decodes it strictly into into, so
// a misspelled field in a template fails the test.
func (m manifest) decode(t *testing.T, kind string, into any) bool {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, u := range m.docs {
		if u.GetKind() == kind {
			found = append(found, u)
		}
	}
	switch len(found) {
	case 0:
		return false
	case 1:
		decodeStrict(t, found[0], into)
		return true
	default:
		t.Fatalf("%d objects of kind %s, want one", len(found), kind)
		return false
	}
}

// decodeAll decodes every object of kind strictly, keyed by name.
func decodeAll[T any](t *testing.T, m manifest, kind string) map[string]*T {
	t.Helper()
	out := map[string]*T{}
	for _, u := range m.docs {
		if u.GetKind() == kind {
			v := new(T)
			decodeStrict(t, u, v)
			out[u.GetName()] = v
		}
	}
	return out
}

// decodeStrict decodes u into into, failing on any field into lacks.
func decodeStrict(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	raw, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		t.Fatalf("%s/%s does not decode strictly: %v\n%s", u.GetKind(), u.GetName(), err, raw)
	}
}

func TestRenderedObjects(t *testing.T) {
	const fullname = "llama-inferpick"
	// withPool lists, sorted, what every release that creates the pool
	// "llama" renders, and extra.
	withPool := func(extra ...string) []string {
		ks := append([]string{
			"ClusterRole/serving-llama-inferpick-auth",
			"ClusterRole/serving-llama-inferpick-metrics-reader",
			"ClusterRoleBinding/serving-llama-inferpick-auth",
			"ConfigMap/" + fullname,
			"Deployment/" + fullname,
			"InferencePool/llama",
			"Role/" + fullname,
			"RoleBinding/" + fullname,
			"Service/" + fullname,
			"ServiceAccount/" + fullname,
		}, extra...)
		slices.Sort(ks)
		return ks
	}
	tests := map[string]struct {
		kinds []string
		// args the picker container must have, and must not have.
		args, noArgs []string
		// pool is the --pool-name; poolPorts the InferencePool's targetPorts
		// when the chart creates it.
		pool      string
		poolPorts []int32
	}{
		"default": {
			kinds: withPool(),
			args: []string{"--pool-name=llama", "--secure-serving=true", "--metrics-endpoint-auth=true",
				"--config-file=/etc/inferpick/config/config.yaml", "--drain-timeout=115s"},
			noArgs:    []string{"--ha-enable-leader-election", "--cert-path", "--policy", "--max-request-body-bytes"},
			pool:      "llama",
			poolPorts: []int32{8000},
		},
		"ha": {
			kinds: withPool(
				"Role/"+fullname+"-leader-election",
				"RoleBinding/"+fullname+"-leader-election",
			),
			args:      []string{"--ha-enable-leader-election", "--ha-mode=active-active", "--fallbacks=1", "-v=2"},
			pool:      "llama",
			poolPorts: []int32{8000},
		},
		"httproute": {
			kinds: withPool(
				"HTTPRoute/llama",
				"ServiceMonitor/"+fullname,
			),
			noArgs:    []string{"--ha-enable-leader-election"},
			pool:      "llama",
			poolPorts: []int32{8000, 8001},
		},
		"existing-pool": {
			kinds: []string{
				"ConfigMap/" + fullname,
				"Deployment/" + fullname,
				"Role/" + fullname,
				"RoleBinding/" + fullname,
				"Service/" + fullname,
				"ServiceAccount/shared-picker",
				"ServiceMonitor/" + fullname,
			},
			args: []string{"--pool-name=shared-pool", "--metrics-endpoint-auth=false", "--policy=least-load",
				"--model-server-metrics-port=9400", "--model-server-metrics-path=/v1/metrics",
				"--max-request-body-bytes=4194304"},
			pool: "shared-pool",
		},
		"tls-secret": {
			kinds:     withPool(),
			args:      []string{"--cert-path=/etc/inferpick/tls", "--drain-timeout=45s", "--vmodule=server=4"},
			pool:      "llama",
			poolPorts: []int32{8000},
		},
		"gke": {
			kinds: withPool(
				"ClusterRoleBinding/serving-llama-inferpick-metrics-reader",
				"GCPBackendPolicy/llama",
				"HealthCheckPolicy/llama",
				"PodMonitoring/"+fullname,
				"Role/"+fullname+"-gmp-token",
				"RoleBinding/"+fullname+"-gmp-token",
				"Secret/"+fullname+"-metrics-reader",
				"ServiceAccount/"+fullname+"-metrics-reader",
			),
			pool:      "llama",
			poolPorts: []int32{8000, 8001},
		},
		"istio": {
			kinds: withPool(
				"ClusterRoleBinding/serving-llama-inferpick-metrics-reader",
				"DestinationRule/"+fullname,
				"Secret/"+fullname+"-metrics-reader",
				"ServiceAccount/"+fullname+"-metrics-reader",
				"ServiceMonitor/"+fullname,
			),
			pool:      "llama",
			poolPorts: []int32{8000},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, errOut, err := render(t, cases[name])
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			m := parseManifest(t, out)
			if diff := cmp.Diff(tc.kinds, m.kinds()); diff != "" {
				t.Errorf("rendered objects (-want +got):\n%s", diff)
			}

			var dep appsv1.Deployment
			if !m.decode(t, "Deployment", &dep) {
				t.Fatal("no Deployment")
			}
			c := dep.Spec.Template.Spec.Containers[0]
			for _, a := range tc.args {
				if !slices.Contains(c.Args, a) {
					t.Errorf("picker args %q lack %q", c.Args, a)
				}
			}
			for _, a := range tc.noArgs {
				if slices.ContainsFunc(c.Args, func(s string) bool { return strings.HasPrefix(s, a) }) {
					t.Errorf("picker args %q have %q", c.Args, a)
				}
			}
			checkPodHardening(t, &dep)

			var svc corev1.Service
			if !m.decode(t, "Service", &svc) {
				t.Fatal("no Service")
			}
			checkService(t, &svc, &dep)

			var cm corev1.ConfigMap
			if !m.decode(t, "ConfigMap", &cm) {
				t.Fatal("no ConfigMap")
			}
			checkPolicyConfig(t, cm.Data["config.yaml"])

			var pool inferencev1.InferencePool
			if m.decode(t, "InferencePool", &pool) {
				checkPool(t, &pool, &svc, tc.pool, tc.poolPorts)
			} else if tc.poolPorts != nil {
				t.Error("no InferencePool")
			}

			var route gatewayv1.HTTPRoute
			if m.decode(t, "HTTPRoute", &route) {
				checkRoute(t, &route, tc.pool)
			}
			checkBindings(t, m, dep.Spec.Template.Spec.ServiceAccountName)
		})
	}
}

func checkPodHardening(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("container has no securityContext")
	}
	hardened := sc.RunAsNonRoot != nil && *sc.RunAsNonRoot &&
		sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem &&
		sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation &&
		sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) &&
		sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
	if !hardened {
		t.Errorf("container securityContext is not hardened: %+v", sc)
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.GRPC == nil || p.GRPC.Port != 9003 {
			t.Fatalf("probe is not gRPC on 9003: %+v", p)
		}
	}
	if got := *c.LivenessProbe.GRPC.Service + "," + *c.ReadinessProbe.GRPC.Service; got != "liveness,readiness" {
		t.Errorf("probe services = %s, want liveness,readiness", got)
	}
	var ns *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "NAMESPACE" {
			ns = &c.Env[i]
		}
	}
	if ns == nil || ns.ValueFrom == nil || ns.ValueFrom.FieldRef == nil || ns.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("NAMESPACE does not come from the downward API: %+v", ns)
	}
	if pod.ServiceAccountName == "" {
		t.Error("pod has no serviceAccountName")
	}
}

func checkService(t *testing.T, svc *corev1.Service, dep *appsv1.Deployment) {
	t.Helper()
	if diff := cmp.Diff(dep.Spec.Selector.MatchLabels, svc.Spec.Selector); diff != "" {
		t.Errorf("Service selector differs from the Deployment's (-deployment +service):\n%s", diff)
	}
	containerPorts := map[string]int32{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		containerPorts[p.Name] = p.ContainerPort
	}
	for _, p := range svc.Spec.Ports {
		if _, ok := containerPorts[p.TargetPort.StrVal]; !ok {
			t.Errorf("Service port %s targets %q, which the container does not name", p.Name, p.TargetPort.StrVal)
		}
	}
	grpc := servicePort(svc, "grpc")
	if grpc == nil || grpc.AppProtocol == nil || *grpc.AppProtocol != "http2" {
		t.Errorf("Service grpc port is not appProtocol http2: %+v", grpc)
	}
}

func servicePort(svc *corev1.Service, name string) *corev1.ServicePort {
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Name == name {
			return &svc.Spec.Ports[i]
		}
	}
	return nil
}

// checkPolicyConfig reads the ConfigMap's file the way --config-file does:
// strictly, then defaulted and validated.
func checkPolicyConfig(t *testing.T, doc string) {
	t.Helper()
	var fc struct {
		Policy policy.Config `json:"policy"`
	}
	if err := yaml.UnmarshalStrict([]byte(doc), &fc); err != nil {
		t.Fatalf("config.yaml is not a valid --config-file: %v\n%s", err, doc)
	}
	if err := fc.Policy.Default().Validate(); err != nil {
		t.Errorf("config.yaml policy is invalid: %v", err)
	}
}

func checkPool(t *testing.T, pool *inferencev1.InferencePool, svc *corev1.Service, name string, ports []int32) {
	t.Helper()
	if pool.Name != name {
		t.Errorf("pool name = %q, want %q", pool.Name, name)
	}
	var got []int32
	for _, p := range pool.Spec.TargetPorts {
		got = append(got, int32(p.Number))
	}
	if diff := cmp.Diff(ports, got); diff != "" {
		t.Errorf("pool targetPorts (-want +got):\n%s", diff)
	}
	ref := pool.Spec.EndpointPickerRef
	grpc := servicePort(svc, "grpc")
	if ref == nil || string(ref.Name) != svc.Name || ref.Port == nil || grpc == nil || int32(ref.Port.Number) != grpc.Port {
		t.Errorf("endpointPickerRef %+v does not point at Service %s port grpc", ref, svc.Name)
	}
}

func checkRoute(t *testing.T, route *gatewayv1.HTTPRoute, pool string) {
	t.Helper()
	var refs []string
	for _, r := range route.Spec.Rules {
		for _, b := range r.BackendRefs {
			refs = append(refs, fmt.Sprintf("%s/%s/%s", ptrOr(b.Group), ptrOr(b.Kind), b.Name))
		}
	}
	want := []string{"inference.networking.k8s.io/InferencePool/" + pool}
	if diff := cmp.Diff(want, refs); diff != "" {
		t.Errorf("HTTPRoute backendRefs (-want +got):\n%s", diff)
	}
}

func ptrOr[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

// checkBindings checks that every binding grants a role of this release to
// the picker's ServiceAccount and to nobody else.
func checkBindings(t *testing.T, m manifest, sa string) {
	t.Helper()
	roles := decodeAll[rbacv1.Role](t, m, "Role")
	clusterRoles := decodeAll[rbacv1.ClusterRole](t, m, "ClusterRole")
	check := func(kind, name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: namespace}}
		switch {
		case strings.HasSuffix(name, "-metrics-reader"):
			// The scrapers' identity, not the picker's.
			want = []rbacv1.Subject{{Kind: "ServiceAccount", Name: "llama-inferpick-metrics-reader", Namespace: namespace}}
		case strings.HasSuffix(name, "-gmp-token"):
			// Managed Prometheus's collector reads the token Secret.
			want = []rbacv1.Subject{{Kind: "ServiceAccount", Name: "collector", Namespace: "gke-gmp-system"}}
		}
		if diff := cmp.Diff(want, subjects); diff != "" {
			t.Errorf("%s %s subjects (-want +got):\n%s", kind, name, diff)
		}
		switch ref.Kind {
		case "Role":
			if roles[ref.Name] == nil {
				t.Errorf("%s %s binds Role %s, which the chart does not render", kind, name, ref.Name)
			}
		case "ClusterRole":
			if clusterRoles[ref.Name] == nil {
				t.Errorf("%s %s binds ClusterRole %s, which the chart does not render", kind, name, ref.Name)
			}
		}
	}
	for name, b := range decodeAll[rbacv1.RoleBinding](t, m, "RoleBinding") {
		check("RoleBinding", name, b.RoleRef, b.Subjects)
	}
	for name, b := range decodeAll[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding") {
		check("ClusterRoleBinding", name, b.RoleRef, b.Subjects)
	}
}

// TestClusterObjectsOfTwoReleases checks that two releases in one namespace
// never render a cluster-scoped object of the same name, however long the
// namespace and release names: the second install would fail on the first's
// ClusterRole, or take it over.
func TestClusterObjectsOfTwoReleases(t *testing.T) {
	namespaces := map[string]string{
		"short namespace":   namespace,
		"long namespace":    "inference-serving-production-europe-west4-" + strings.Repeat("a", 20),
		"longest namespace": strings.Repeat("n", 63),
	}
	for name, ns := range namespaces {
		t.Run(name, func(t *testing.T) {
			seen := map[string]string{}
			for _, rel := range []string{"llama-3-1-70b-instruct-a", "llama-3-1-70b-instruct-b"} {
				out, errOut, err := templateAs(t, rel, ns, kubeVersion, valuesArgs(nil, "metrics.serviceMonitor.enabled=true")...)
				if err != nil {
					t.Fatalf("helm template %s: %v\n%s", rel, err, errOut)
				}
				for _, u := range parseManifest(t, out).docs {
					if u.GetNamespace() != "" {
						continue
					}
					key := u.GetKind() + "/" + u.GetName()
					if other, ok := seen[key]; ok {
						t.Errorf("releases %s and %s both render %s", other, rel, key)
					}
					seen[key] = rel
				}
			}
			if len(seen) == 0 {
				t.Fatal("no cluster-scoped objects rendered")
			}
		})
	}
}

// TestServiceNameOfAnyRelease checks that the picker's Service gets a name
// the API server takes for every release name helm takes, dots included.
func TestServiceNameOfAnyRelease(t *testing.T) {
	for _, rel := range []string{"llama", "llama.v2", "llama-3.1-8b", strings.Repeat("l", 53)} {
		t.Run(rel, func(t *testing.T) {
			out, errOut, err := templateAs(t, rel, namespace, kubeVersion, valuesArgs(nil)...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			m := parseManifest(t, out)
			var svc corev1.Service
			if !m.decode(t, "Service", &svc) {
				t.Fatal("no Service")
			}
			if errs := validation.IsDNS1123Label(svc.Name); len(errs) > 0 {
				t.Errorf("Service name %q: %s", svc.Name, strings.Join(errs, "; "))
			}
			var pool inferencev1.InferencePool
			m.decode(t, "InferencePool", &pool)
			if pool.Spec.EndpointPickerRef == nil || string(pool.Spec.EndpointPickerRef.Name) != svc.Name {
				t.Errorf("pool's picker %+v, want the Service %s", pool.Spec.EndpointPickerRef, svc.Name)
			}
		})
	}
}

// TestServiceNameStartingWithADigit checks a release whose name starts with
// a digit (8b-llama): Kubernetes before 1.36 takes a Service name only when
// it starts with a letter (a DNS-1035 label), so there the render fails
// saying how to name the Service, where the install would fail on the
// Service alone.
func TestServiceNameStartingWithADigit(t *testing.T) {
	tests := map[string]struct {
		kubeVersion string
		sets        []string
		wantService string
		wantFail    string
	}{
		"Kubernetes 1.36": {kubeVersion: "1.36.0", wantService: "8b-llama-inferpick"},
		"Kubernetes 1.35": {kubeVersion: "1.35.4", wantFail: "fullnameOverride"},
		"Kubernetes 1.35, the name overridden": {
			kubeVersion: "1.35.4", sets: []string{"fullnameOverride=llama-8b"}, wantService: "llama-8b",
		},
		"Kubernetes 1.35, overridden with a digit first": {
			kubeVersion: "1.35.4", sets: []string{"fullnameOverride=8b"}, wantFail: "fullnameOverride",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, errOut, err := templateAs(t, "8b-llama", namespace, tc.kubeVersion, valuesArgs(nil, tc.sets...)...)
			if tc.wantFail != "" {
				if err == nil || !strings.Contains(errOut, tc.wantFail) || !strings.Contains(errOut, "1.36") {
					t.Fatalf("rendered (err %v), want a failure naming %s and Kubernetes 1.36:\n%s", err, tc.wantFail, errOut)
				}
				return
			}
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			var svc corev1.Service
			if !parseManifest(t, out).decode(t, "Service", &svc) || svc.Name != tc.wantService {
				t.Errorf("Service %q, want %q", svc.Name, tc.wantService)
			}
		})
	}
}

// TestFlagValuesKeptWhole checks that free-text values reach the picker's
// flags as given, whatever YAML would make of them unquoted (a comment after
// " #", a mapping after ": ").
func TestFlagValuesKeptWhole(t *testing.T) {
	for value, want := range map[string]string{
		"picker.kvEvents.topic=kv #llama":                "--kv-events-topic=kv #llama",
		"picker.kvEvents.topic=pool: llama":              "--kv-events-topic=pool: llama",
		"picker.modelServerMetrics.path=/stats #metrics": "--model-server-metrics-path=/stats #metrics",
	} {
		t.Run(value, func(t *testing.T) {
			out, errOut, err := render(t, nil, "picker.kvEvents.port=5557", value)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			if args := pickerArgs(t, parseManifest(t, out)); !slices.Contains(args, want) {
				t.Errorf("picker args %q lack %q", args, want)
			}
		})
	}
}

// TestNamesKeptAsStrings checks that names from the release and the values
// reach the objects as the strings given, whatever YAML makes of them
// unquoted: on, yes and true are booleans, 0123 and 1e3 numbers, a leading
// * an alias and " #" a comment. The API server refuses such an object, or
// the manifest does not parse, and the install fails.
func TestNamesKeptAsStrings(t *testing.T) {
	type want struct {
		kind  string
		path  []string
		value string
	}
	tests := map[string]struct {
		release, namespace string
		sets               []string // --set
		names              []string // --set-string
		want               []want
	}{
		"release and namespace": {
			release: "on", namespace: "0123",
			sets: []string{"httpRoute.enabled=true", "httpRoute.gateway.name=inference-gateway", "replicas=2"},
			want: []want{
				{"InferencePool", []string{"metadata", "name"}, "on"},
				{"HTTPRoute", []string{"metadata", "name"}, "on"},
				{"HTTPRoute", []string{"spec", "rules", "0", "backendRefs", "0", "name"}, "on"},
				{"Deployment", []string{"spec", "selector", "matchLabels", "app.kubernetes.io/instance"}, "on"},
				{"Service", []string{"spec", "selector", "app.kubernetes.io/instance"}, "on"},
				{"RoleBinding", []string{"subjects", "0", "namespace"}, "0123"},
			},
		},
		"release read as a number": {
			release: "1e3", namespace: "true",
			want: []want{{"InferencePool", []string{"metadata", "name"}, "1e3"}},
		},
		"names in the values": {
			release: "llama", namespace: "serving",
			sets: []string{"httpRoute.enabled=true", "metrics.serviceMonitor.enabled=true", "monitoring.grafanaDashboard.enabled=true"},
			names: []string{
				"nameOverride=true", "pool.name=yes", "serviceAccount.name=off", "priorityClassName=0123",
				"tls.secretName=1e3", "tls.clientCASecretName=no",
				"httpRoute.name=y", "httpRoute.gateway.name=true",
				"httpRoute.gateway.namespace=0123", "httpRoute.gateway.sectionName=on",
				"metrics.serviceMonitor.tokenSecret=yes", "monitoring.grafanaDashboard.namespace=1e3",
			},
			want: []want{
				{"Deployment", []string{"spec", "selector", "matchLabels", "app.kubernetes.io/name"}, "true"},
				{"InferencePool", []string{"metadata", "name"}, "yes"},
				{"ServiceAccount", []string{"metadata", "name"}, "off"},
				{"Deployment", []string{"spec", "template", "spec", "serviceAccountName"}, "off"},
				{"Deployment", []string{"spec", "template", "spec", "priorityClassName"}, "0123"},
				{"Deployment", []string{"spec", "template", "spec", "volumes", "1", "secret", "secretName"}, "1e3"},
				{"Deployment", []string{"spec", "template", "spec", "volumes", "2", "secret", "secretName"}, "no"},
				{"HTTPRoute", []string{"metadata", "name"}, "y"},
				{"HTTPRoute", []string{"spec", "parentRefs", "0", "name"}, "true"},
				{"HTTPRoute", []string{"spec", "parentRefs", "0", "namespace"}, "0123"},
				{"HTTPRoute", []string{"spec", "parentRefs", "0", "sectionName"}, "on"},
				{"ServiceMonitor", []string{"spec", "endpoints", "0", "authorization", "credentials", "name"}, "yes"},
				{"ConfigMap", []string{"metadata", "namespace"}, "1e3"},
			},
		},
		"istio host": {
			release: "llama", namespace: "serving",
			names: []string{"provider.name=istio", "provider.istio.destinationRule.host=*.serving.svc.cluster.local"},
			want:  []want{{"DestinationRule", []string{"spec", "host"}, "*.serving.svc.cluster.local"}},
		},
		"gke health check path": {
			release: "llama", namespace: "serving",
			names: []string{"provider.name=gke", "provider.gke.healthCheckPath=/health #live"},
			want:  []want{{"HealthCheckPolicy", []string{"spec", "default", "config", "httpHealthCheck", "requestPath"}, "/health #live"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := valuesArgs(nil, tc.sets...)
			for _, s := range tc.names {
				args = append(args, "--set-string", s)
			}
			out, errOut, err := templateAs(t, tc.release, tc.namespace, kubeVersion, args...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			m := parseManifest(t, out)
			for _, u := range m.docs {
				meta := u.Object["metadata"].(map[string]any)
				if ns, ok := meta["namespace"]; ok && ns != tc.namespace && u.GetKind() != "ConfigMap" {
					t.Errorf("%s %v in namespace %#v, want %q", u.GetKind(), meta["name"], ns, tc.namespace)
				}
				if labels, ok := meta["labels"].(map[string]any); ok && labels["app.kubernetes.io/instance"] != tc.release {
					t.Errorf("%s %v labelled instance %#v, want %q", u.GetKind(), meta["name"], labels["app.kubernetes.io/instance"], tc.release)
				}
			}
			for _, w := range tc.want {
				var got []any
				for _, u := range m.docs {
					if u.GetKind() == w.kind {
						got = append(got, lookup(u.Object, w.path...))
					}
				}
				if !slices.Contains(got, any(w.value)) {
					t.Errorf("%s %s: %#v, want the string %q", w.kind, strings.Join(w.path, "."), got, w.value)
				}
			}
		})
	}
}

// lookup reads a nested field of a decoded object, a number in the path
// indexing a list; nil when there is none.
func lookup(v any, path ...string) any {
	for _, p := range path {
		switch c := v.(type) {
		case map[string]any:
			v = c[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i >= len(c) {
				return nil
			}
			v = c[i]
		default:
			return nil
		}
	}
	return v
}

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gstruct"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	"github.com/inferpick/inferpick/test/gateway"
)

const (
	release  = "llama"
	fullname = "llama-inferpick"
	poolName = "llama"
)

var _ = Describe("The chart installed with helm", Ordered, func() {
	var (
		ns       string
		ips      []string
		port     int
		manifest []*unstructured.Unstructured
		notes    string // helm install's output, NOTES.txt included
		pods     []*corev1.Pod
		picker   *pickerProcess
		pickerKC string
		pickerCS kubernetes.Interface
		pickerSA string // the picker ServiceAccount's bearer token
		scraper  string // bearer token allowed to read the metrics port
	)

	addrs := func(p int) []string {
		out := make([]string, 0, len(pods))
		for _, pod := range pods {
			out = append(out, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(p)))
		}
		slices.Sort(out)
		return out
	}

	BeforeAll(func(ctx SpecContext) {
		ns = fmt.Sprintf("e2e-%06d", rand.IntN(1_000_000))
		// A /24 of the loopback network of our own, so concurrent runs on the
		// machine rarely meet.
		subnet := 10 + rand.IntN(240)
		for i := range 3 {
			ips = append(ips, fmt.Sprintf("127.0.%d.%d", subnet, 11+i))
		}
		port = freePort()

		values := filepath.Join(suite.tmp, "values.yaml")
		Expect(os.WriteFile(values, fmt.Appendf(nil, `
pool:
  selector:
    matchLabels:
      app: vllm-sim
  targetPorts: [%d]
httpRoute:
  enabled: true
  gateway:
    name: inference-gateway
picker:
  refreshMetricsInterval: 100ms
  verbosity: 3
`, port), 0o644)).To(Succeed())

		By("helm install " + release + " into " + ns)
		notes = run(ctx, suite.helm, "install", release, suite.chart, "--namespace", ns, "--create-namespace", "--values", values)
		manifest = decodeManifest(run(ctx, suite.helm, "get", "manifest", release, "--namespace", ns))

		By("creating ready model-server pods and their vllm-sim processes")
		for i, ip := range ips {
			pod := makePod(ns, fmt.Sprintf("vllm-%d", i)).Label("app", "vllm-sim").Obj()
			pods = append(pods, createReadyPod(ctx, pod, ip))
			startModelServer(ctx, ip, port)
		}
		// A pod the selector does not match is never routed to.
		createReadyPod(ctx, makePod(ns, "other").Label("app", "other").Obj(), ips[0])

		By("starting the picker with the Deployment's args, as the chart's ServiceAccount")
		cfg := serviceAccountConfig(ctx, ns, fullname)
		pickerKC = writeKubeconfig(cfg, "picker")
		pickerSA = cfg.BearerToken
		var err error
		pickerCS, err = kubernetes.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
		picker = startPicker(ctx, ns, fullname, pickerKC)
		scraper = metricsReaderToken(ctx, ns)
	}, NodeTimeout(2*time.Minute))

	It("creates the CRD and the release's objects", func(ctx SpecContext) {
		var crd apiextensionsv1.CustomResourceDefinition
		Expect(suite.client.Get(ctx, client.ObjectKey{Name: "inferencepools.inference.networking.k8s.io"}, &crd)).To(Succeed(),
			"helm installs the chart's crds/")

		Expect(manifestKinds(manifest)).To(ConsistOf(
			"ClusterRole/"+ns+"-llama-inferpick-auth",
			"ClusterRole/"+ns+"-llama-inferpick-metrics-reader",
			"ClusterRoleBinding/"+ns+"-llama-inferpick-auth",
			"ConfigMap/"+fullname,
			"Deployment/"+fullname,
			"HTTPRoute/"+poolName,
			"InferencePool/"+poolName,
			"Role/"+fullname,
			"RoleBinding/"+fullname,
			"Service/"+fullname,
			"ServiceAccount/"+fullname,
		))
		for _, u := range manifest {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(u.GroupVersionKind())
			Expect(suite.client.Get(ctx, client.ObjectKeyFromObject(u), got)).To(Succeed(), "%s %s", u.GetKind(), u.GetName())
		}

		var pool inferencev1.InferencePool
		Expect(suite.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: poolName}, &pool)).To(Succeed())
		Expect(pool.Spec.Selector.MatchLabels).To(Equal(map[inferencev1.LabelKey]inferencev1.LabelValue{"app": "vllm-sim"}))
		Expect(pool.Spec.TargetPorts).To(Equal([]inferencev1.Port{{Number: inferencev1.PortNumber(port)}}))
		Expect(pool.Spec.AppProtocol).To(Equal(inferencev1.AppProtocolHTTP))
		Expect(pool.Spec.EndpointPickerRef).To(gstruct.PointTo(gstruct.MatchFields(gstruct.IgnoreExtras, gstruct.Fields{
			"Kind":        BeEquivalentTo("Service"),
			"Name":        BeEquivalentTo(fullname),
			"Port":        Equal(&inferencev1.Port{Number: 9002}),
			"FailureMode": Equal(inferencev1.EndpointPickerFailOpen),
		})))

		var svc corev1.Service
		Expect(suite.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: fullname}, &svc)).To(Succeed())
		Expect(svc.Spec.Ports).To(ContainElement(gstruct.MatchFields(gstruct.IgnoreExtras, gstruct.Fields{
			"Name": Equal("grpc"), "Port": BeEquivalentTo(9002), "AppProtocol": Equal(ptr.To("http2")),
		})))

		var route gatewayv1.HTTPRoute
		Expect(suite.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: poolName}, &route)).To(Succeed())
		Expect(route.Spec.ParentRefs).To(HaveExactElements(HaveField("Name", BeEquivalentTo("inference-gateway"))))
		Expect(route.Spec.Rules).To(HaveExactElements(HaveField("BackendRefs", HaveExactElements(
			HaveField("BackendObjectReference", gatewayv1.BackendObjectReference{
				Group: ptr.To[gatewayv1.Group]("inference.networking.k8s.io"),
				Kind:  ptr.To[gatewayv1.Kind]("InferencePool"),
				Name:  poolName,
			})))))

		By("kubectl get infpool, as NOTES.txt suggests")
		for _, cmd := range []string{
			"kubectl get infpool llama -n " + ns,
			"kubectl describe infpool llama -n " + ns,
			"kubectl logs -n " + ns + " deploy/" + fullname,
			"kubectl port-forward -n " + ns + " svc/" + fullname + " 9090:9090",
			"http://127.0.0.1:9090/debug/workers",
			ns + "-" + fullname + "-metrics-reader",
			"The route allows requests 300 s, the picker drains for 115 s",
		} {
			Expect(notes).To(ContainSubstring(cmd), "NOTES.txt")
		}
		out := run(ctx, suite.kubectl, "get", "infpool", "--namespace", ns)
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+PORTS\s+PICKER\s+FAILURE MODE\s+AGE$`))
		Expect(out).To(MatchRegexp(`(?m)^%s\s+\[\{"number":%d\}\]\s+%s\s+FailOpen\s`, poolName, port, fullname))
	})

	It("grants the ServiceAccount what the picker needs and nothing more", func(ctx SpecContext) {
		allowed := []access{
			{verb: "list", resource: "pods", namespace: ns},
			{verb: "watch", resource: "pods", namespace: ns},
			{verb: "get", group: "inference.networking.k8s.io", resource: "inferencepools", namespace: ns},
			{verb: "watch", group: "inference.networking.k8s.io", resource: "inferencepools", namespace: ns},
			{verb: "watch", group: "inference.networking.x-k8s.io", resource: "inferencemodelrewrites", namespace: ns},
			{verb: "patch", group: "inference.networking.x-k8s.io", resource: "inferencemodelrewrites", namespace: ns, subresource: "status"},
			{verb: "create", resource: "events", namespace: ns},
			{verb: "patch", resource: "events", namespace: ns},
			{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews"},
			{verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews"},
		}
		denied := []access{
			{verb: "get", resource: "secrets", namespace: ns},
			{verb: "list", resource: "secrets", namespace: ns},
			{verb: "list", resource: "configmaps", namespace: ns},
			{verb: "create", resource: "pods", namespace: ns},
			{verb: "delete", resource: "pods", namespace: ns},
			{verb: "update", resource: "pods", namespace: ns, subresource: "status"},
			{verb: "list", resource: "pods"},
			{verb: "list", resource: "pods", namespace: "kube-system"},
			{verb: "list", group: "inference.networking.k8s.io", resource: "inferencepools"},
			{verb: "update", group: "inference.networking.k8s.io", resource: "inferencepools", namespace: ns},
			{verb: "update", group: "inference.networking.k8s.io", resource: "inferencepools", namespace: ns, subresource: "status"},
			{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: ns},
			{verb: "update", group: "inference.networking.x-k8s.io", resource: "inferencemodelrewrites", namespace: ns},
			{verb: "update", group: "inference.networking.x-k8s.io", resource: "inferencemodelrewrites", namespace: ns, subresource: "status"},
			{verb: "create", group: "events.k8s.io", resource: "events", namespace: ns},
			{verb: "list", resource: "nodes"},
			{verb: "create", resource: "serviceaccounts", namespace: ns, subresource: "token"},
		}
		for _, a := range allowed {
			Expect(canI(ctx, pickerCS, a)).To(BeTrue(), "the picker may not %+v", a)
		}
		for _, a := range denied {
			Expect(canI(ctx, pickerCS, a)).To(BeFalse(), "the picker may %+v", a)
		}
		_, err := pickerCS.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing secrets: %v", err)
	})

	It("runs the picker as that ServiceAccount and routes through the gateway to the pool's pods", func(ctx SpecContext) {
		picker.waitReady(ctx)

		By("reading /debug/workers with a token bound to the metrics-reader ClusterRole")
		Eventually(func() ([]string, error) { return picker.workerAddresses(ctx, scraper) }).
			WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(addrs(port)))

		code, _, err := picker.get(ctx, "/debug/workers", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(401), "no token")
		code, _, err = picker.get(ctx, "/metrics", pickerSA)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(403), "a token without the metrics-reader role")

		By("sending completions through the gateway stand-in")
		base, records := gatewayFor(picker)
		served := map[string]int{}
		for i := range 9 {
			code, body, rec := complete(ctx, base, records, fmt.Sprintf("request %d: tell me about inference gateways", i))
			Expect(code).To(Equal(200), body)
			Expect(body).To(ContainSubstring(`"choices"`))
			Expect(rec.ExtProcStreams).To(Equal(1))
			Expect(addrs(port)).To(ContainElement(rec.Served), "served by an endpoint outside the pool")
			served[rec.Served]++
		}
		GinkgoWriter.Printf("requests per endpoint: %v\n", served)
	})
	It("reports the pool's endpoints as Events, shown by kubectl describe", func(ctx SpecContext) {
		Eventually(func(g Gomega) {
			g.Expect(poolEvents(ctx, g, ns)).To(ContainElement(
				"Normal EndpointsChanged inferpick: 3 ready endpoints"))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

		out := run(ctx, suite.kubectl, "describe", "infpool", poolName, "--namespace", ns)
		Expect(out).To(MatchRegexp(`(?m)^Events:`))
		Expect(out).To(MatchRegexp(`Normal\s+EndpointsChanged\s+.*3 ready endpoints`))
	})

	It("stops routing to a pod that goes away", func(ctx SpecContext) {
		gone := pods[2]
		Expect(suite.client.Delete(ctx, gone)).To(Succeed())
		pods = pods[:2]
		Eventually(func() ([]string, error) { return picker.workerAddresses(ctx, scraper) }).
			WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(addrs(port)))
		Eventually(func(g Gomega) {
			g.Expect(poolEvents(ctx, g, ns)).To(ContainElement(
				"Normal EndpointsChanged inferpick: 2 ready endpoints (was 3)"))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

		base, records := gatewayFor(picker)
		expectServedBy(ctx, base, records, "after the deletion", addrs(port))
	})

	It("upgrades to three replicas with leader election and new target ports", func(ctx SpecContext) {
		newPort := freePort()
		for _, pod := range pods {
			startModelServer(ctx, pod.Status.PodIP, newPort)
		}

		By("helm upgrade --set replicas=3,pool.targetPorts={new port}")
		run(ctx, suite.helm, "upgrade", release, suite.chart, "--namespace", ns, "--reuse-values",
			"--set", "replicas=3", "--set", fmt.Sprintf("pool.targetPorts={%d}", newPort))
		manifest = decodeManifest(run(ctx, suite.helm, "get", "manifest", release, "--namespace", ns))
		Expect(manifestKinds(manifest)).To(ContainElements(
			"Role/"+fullname+"-leader-election", "RoleBinding/"+fullname+"-leader-election"))

		var dep appsv1.Deployment
		Expect(suite.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: fullname}, &dep)).To(Succeed())
		Expect(dep.Spec.Replicas).To(Equal(ptr.To[int32](3)))
		Expect(dep.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--ha-enable-leader-election"))

		By("the running picker follows the pool's new port")
		Eventually(func() ([]string, error) { return picker.workerAddresses(ctx, scraper) }).
			WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(addrs(newPort)))

		By("a picker started with the new args elects itself on the chart's Lease permissions")
		Expect(canI(ctx, pickerCS, access{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: ns})).To(BeTrue())
		picker.stop()
		picker = startPicker(ctx, ns, fullname, pickerKC)
		picker.waitReady(ctx)
		// Active-active: ready does not wait for the lease, which follows.
		Eventually(func(g Gomega) {
			var lease coordinationv1.Lease
			g.Expect(suite.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "inferpick-" + poolName}, &lease)).To(Succeed())
			g.Expect(lease.Spec.HolderIdentity).To(HaveValue(Not(BeEmpty())))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		Eventually(func() ([]string, error) { return picker.workerAddresses(ctx, scraper) }).
			WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(addrs(newPort)))

		base, records := gatewayFor(picker)
		expectServedBy(ctx, base, records, "after the upgrade", addrs(newPort))
	})

	It("uninstalls without leaving the release's objects behind, keeping the CRD", func(ctx SpecContext) {
		picker.stop()
		Expect(manifest).NotTo(BeEmpty())
		run(ctx, suite.helm, "uninstall", release, "--namespace", ns)

		for _, u := range manifest {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(u.GroupVersionKind())
			err := suite.client.Get(ctx, client.ObjectKeyFromObject(u), got)
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s %s is left: %v", u.GetKind(), u.GetName(), err)
		}
		for _, list := range []client.ObjectList{
			&appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ServiceAccountList{}, &corev1.ConfigMapList{},
			&rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &rbacv1.ClusterRoleList{}, &rbacv1.ClusterRoleBindingList{},
			&inferencev1.InferencePoolList{}, &gatewayv1.HTTPRouteList{},
		} {
			// Other specs install releases of the same name in namespaces of
			// their own: this release's objects are those Helm annotated with
			// this namespace.
			Expect(suite.client.List(ctx, list, client.MatchingLabels{"app.kubernetes.io/instance": release})).To(Succeed())
			items, err := meta.ExtractList(list)
			Expect(err).NotTo(HaveOccurred())
			for _, it := range items {
				o, err := meta.Accessor(it)
				Expect(err).NotTo(HaveOccurred())
				Expect(o.GetAnnotations()["meta.helm.sh/release-namespace"]).NotTo(Equal(ns),
					"%T: %s/%s left with the release's labels", it, o.GetNamespace(), o.GetName())
			}
		}
		Expect(run(ctx, suite.helm, "list", "--namespace", ns, "--all", "--short")).To(BeEmpty())

		var crd apiextensionsv1.CustomResourceDefinition
		Expect(suite.client.Get(ctx, client.ObjectKey{Name: "inferencepools.inference.networking.k8s.io"}, &crd)).To(Succeed(),
			"helm never deletes what crds/ installed")

		// The API server looks service accounts up through its own cache: the
		// token stops authenticating once the deletion reaches it.
		Eventually(func() error {
			_, err := pickerCS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			return err
		}).WithContext(ctx).WithTimeout(30*time.Second).Should(Satisfy(apierrors.IsUnauthorized),
			"the deleted ServiceAccount's token still authenticates")
	})
})

// metricsReaderToken returns the token of a ServiceAccount bound to the
// release's metrics-reader ClusterRole, as a Prometheus would be.
func metricsReaderToken(ctx context.Context, ns string) string {
	GinkgoHelper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scraper"}}
	Expect(suite.client.Create(ctx, sa)).To(Succeed())
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ns + "-" + fullname + "-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
	}
	Expect(suite.client.Create(ctx, binding)).To(Succeed())
	// The cleanup runs after the spec, when ctx is done: Ginkgo hands it its own context.
	DeferCleanup(func(ctx SpecContext) { //nolint:contextcheck // a cleanup runs after the spec's context ends and gets its own from Ginkgo.
		Expect(client.IgnoreNotFound(suite.client.Delete(ctx, binding))).To(Succeed())
	})
	return serviceAccountConfig(ctx, ns, sa.Name).BearerToken
}

// poolEvents lists the Events about the pool as "type reason controller: note".
func poolEvents(ctx context.Context, g Gomega, ns string) []string {
	list, err := suite.clientset.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var out []string
	for i := range list.Items {
		if e := &list.Items[i]; e.Regarding.Kind == "InferencePool" && e.Regarding.Name == poolName {
			out = append(out, fmt.Sprintf("%s %s %s: %s", e.Type, e.Reason, e.ReportingController, e.Note))
		}
	}
	return out
}

// expectServedBy sends four completions through the gateway at base:
// each answers 200 from one of addrs.
func expectServedBy(ctx context.Context, base string, records <-chan gateway.Record, what string, addrs []string) {
	GinkgoHelper()
	for i := range 4 {
		code, body, rec := complete(ctx, base, records, fmt.Sprintf("%s %d", what, i))
		Expect(code).To(Equal(200), body)
		Expect(addrs).To(ContainElement(rec.Served))
	}
}

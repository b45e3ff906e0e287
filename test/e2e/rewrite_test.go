package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencev1alpha2 "github.com/inferpick/inferpick/api/v1alpha2"
)

// The model servers serve "sim-model" only and answer 404 for any other
// model, so a request for another name succeeds only when the picker
// rewrote its body.
var _ = Describe("Model rewrites", Ordered, func() {
	const rwRelease = "canary"
	var (
		ns   string
		base string
	)

	BeforeAll(func(ctx SpecContext) {
		ns = fmt.Sprintf("e2e-rewrite-%06d", rand.IntN(1_000_000))
		subnet := 10 + rand.IntN(240)
		port := freePort()
		values := filepath.Join(suite.tmp, "rewrite-values.yaml")
		Expect(os.WriteFile(values, fmt.Appendf(nil, `
pool:
  selector:
    matchLabels:
      app: vllm-sim-rewrite
  targetPorts: [%d]
picker:
  refreshMetricsInterval: 100ms
  verbosity: 3
`, port), 0o644)).To(Succeed())

		By("helm install " + rwRelease + " into " + ns)
		run(ctx, suite.helm, "install", rwRelease, suite.chart, "--namespace", ns, "--create-namespace", "--values", values)

		By("creating two ready model-server pods and their vllm-sim processes")
		for i := range 2 {
			ip := fmt.Sprintf("127.1.%d.%d", subnet, 11+i)
			createReadyPod(ctx, makePod(ns, fmt.Sprintf("vllm-%d", i)).Label("app", "vllm-sim-rewrite").Obj(), ip)
			startModelServer(ctx, ip, port)
		}

		By("starting the picker with the Deployment's args, as the chart's ServiceAccount")
		fullname := rwRelease + "-inferpick"
		p := startPicker(ctx, ns, fullname, writeKubeconfig(serviceAccountConfig(ctx, ns, fullname), "rewrite-picker"))
		p.waitReady(ctx)
		base, _ = gatewayFor(p)
	}, NodeTimeout(2*time.Minute))

	It("sends the requests a rewrite matches to its target, and marks the rewrite Accepted", func(ctx SpecContext) {
		By("without a rewrite the model server does not know the model")
		Eventually(func() (int, error) {
			code, _, err := chat(ctx, base, "food-review", "", false)
			return code, err
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(404))

		By("creating a rewrite of food-review to sim-model")
		rw := &inferencev1alpha2.InferenceModelRewrite{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "food-review-canary"},
			Spec: inferencev1alpha2.InferenceModelRewriteSpec{
				PoolRef: &inferencev1alpha2.PoolObjectReference{Name: rwRelease},
				Rules: []inferencev1alpha2.InferenceModelRewriteRule{{
					Matches: []inferencev1alpha2.Match{{Model: &inferencev1alpha2.ModelMatch{Value: "food-review"}}},
					Targets: []inferencev1alpha2.TargetModel{{ModelRewrite: "sim-model"}},
				}},
			},
		}
		Expect(suite.client.Create(ctx, toUnstructured(rw))).To(Succeed())

		By("the picker, as the chart's ServiceAccount, marks it Accepted")
		Eventually(func(g Gomega) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(inferencev1alpha2.GroupVersion.WithKind("InferenceModelRewrite"))
			g.Expect(suite.client.Get(ctx, client.ObjectKeyFromObject(rw), u)).To(Succeed())
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			var got []metav1.Condition
			for _, c := range conds {
				m := c.(map[string]any)
				got = append(got, metav1.Condition{Type: fmt.Sprint(m["type"]), Status: metav1.ConditionStatus(fmt.Sprint(m["status"])), Reason: fmt.Sprint(m["reason"])})
			}
			g.Expect(meta.IsStatusConditionTrue(got, string(inferencev1alpha2.RewriteConditionAccepted))).To(BeTrue(), "conditions: %v", got)
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

		By("requests for food-review now reach the model server as sim-model, and the client reads food-review back")
		Eventually(func() (int, error) {
			code, _, err := chat(ctx, base, "food-review", "", false)
			return code, err
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(200))
		for range 4 {
			code, body, err := chat(ctx, base, "food-review", "", false)
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(200), body)
			Expect(body).To(ContainSubstring(`"model":"food-review"`))
		}

		By("each event of a streamed answer names food-review")
		code, body, err := chat(ctx, base, "food-review", "", true)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(200), body)
		Expect(strings.Count(body, `"model":"food-review"`)).To(BeNumerically(">=", 2), body)
		Expect(body).NotTo(ContainSubstring("sim-model"))
		Expect(body).To(HaveSuffix("data: [DONE]\n\n"))

		By("the x-gateway-model-name-rewrite header rewrites a model no rule matches")
		code, body, err = chat(ctx, base, "unlisted", "sim-model", false)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(200), body)
		Expect(body).To(ContainSubstring(`"model":"unlisted"`))

		By("deleting the rewrite stops the rewriting")
		Expect(suite.client.Delete(ctx, toUnstructured(rw))).To(Succeed())
		Eventually(func() (int, error) {
			code, _, err := chat(ctx, base, "food-review", "", false)
			return code, err
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(404))
	})
})

// chat sends one chat completion for model through the gateway, with the
// model-rewrite header when rewriteTo is not empty, and returns the status
// and the body.
func chat(ctx context.Context, base, model, rewriteTo string, stream bool) (int, string, error) {
	body := fmt.Sprintf(`{"model":%q,"stream":%t,"messages":[{"role":"user","content":"rate this pizza"}],"max_tokens":4}`, model, stream)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if rewriteTo != "" {
		req.Header.Set("x-gateway-model-name-rewrite", rewriteTo)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got), err
}

// toUnstructured converts obj for the suite's client, whose scheme does not
// know the v1alpha2 kinds.
func toUnstructured(obj *inferencev1alpha2.InferenceModelRewrite) *unstructured.Unstructured {
	GinkgoHelper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(inferencev1alpha2.GroupVersion.WithKind("InferenceModelRewrite"))
	return u
}

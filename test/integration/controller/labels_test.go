package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/integration/framework"
)

var _ = Describe("Label filters", func() {
	poolKey := poolPerSpec("labels")

	It("carry the labels the policy's filters read to each worker, and follow an edit on a running pod that keeps its load", func(ctx SpecContext) {
		const config = "policy:\n  name: least-load\n  labelFilters:\n  - {label: example.com/gpu, values: [h100]}\n" +
			"  - selector: {matchExpressions: [{key: example.com/drain, operator: DoesNotExist}]}\n"
		sinks := newSinks()
		startApp(sinks, nil, append(poolArgs(*poolKey), "--config-text", config)...)
		reg := sinks.Endpoints.(*registry.Registry)
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj())).To(Succeed())
		pod := framework.MakePod(poolKey.Namespace, "vllm-0").Obj()
		pod.Labels["example.com/gpu"] = "h100"
		pod.Labels["example.com/unread"] = "x"
		Expect(env.Client.Create(ctx, pod)).To(Succeed())
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, "127.0.0.1") })
		Eventually(workerAt(reg, "127.0.0.1:8000")).ShouldNot(BeNil())
		w := workerAt(reg, "127.0.0.1:8000")()
		labels := func() map[string]string { return w.Labels().Map() }
		Expect(labels()).To(Equal(map[string]string{"example.com/gpu": "h100"}), "only the labels the filters name are read")

		pol, err := policy.Build(policy.Config{Name: policy.LeastLoad, LabelFilters: []policy.LabelFilter{
			{Label: "example.com/gpu", Values: []string{"h100"}},
			{Selector: &policy.LabelSelector{MatchExpressions: []policy.LabelRequirement{{Key: "example.com/drain", Operator: "DoesNotExist"}}}},
		}}, reg)
		Expect(err).NotTo(HaveOccurred())
		Expect(pol.Pick(&policy.Request{}, reg.Workers(), 1)).To(Equal([]*registry.Worker{w}))
		guard := w.Admit()
		DeferCleanup(func() { guard.Release() })

		By("the pod is labelled for draining while it runs")
		update(ctx, pod, func(p *corev1.Pod) { p.Labels["example.com/drain"] = "true" })
		Eventually(labels).Should(Equal(map[string]string{"example.com/gpu": "h100", "example.com/drain": "true"}))
		Expect(workerAt(reg, "127.0.0.1:8000")()).To(BeIdenticalTo(w), "the same worker")
		Expect(w.InFlight()).To(Equal(int64(1)), "with its request in flight")
		_, err = pol.Pick(&policy.Request{}, reg.Workers(), 1)
		Expect(err).To(MatchError(policy.ErrLabelFilter))

		By("the label is removed again")
		update(ctx, pod, func(p *corev1.Pod) { delete(p.Labels, "example.com/drain") })
		Eventually(labels).Should(Equal(map[string]string{"example.com/gpu": "h100"}))
		Expect(workerAt(reg, "127.0.0.1:8000")()).To(BeIdenticalTo(w))
		Expect(pol.Pick(&policy.Request{}, reg.Workers(), 1)).To(Equal([]*registry.Worker{w}))
	})
})

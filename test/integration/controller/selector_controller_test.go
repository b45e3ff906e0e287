package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/integration/framework"
)

// startSelectorPicker runs a picker for the pods of namespace that sel
// selects, on ports, and returns the registry it fills.
func startSelectorPicker(namespace, sel, ports string) *registry.Registry {
	GinkgoHelper()
	sinks := newSinks()
	startApp(sinks, nil, "--pool-namespace", namespace, "--endpoint-selector", sel, "--endpoint-target-ports", ports)
	return sinks.Endpoints.(*registry.Registry)
}

var _ = Describe("Endpoint selector controller", func() {
	It("serves the ready pods the selector matches, without an InferencePool", func(ctx SpecContext) {
		n := env.Namespace(ctx, "selector")
		reg := startSelectorPicker(n, "app=vllm", "8000,8001")
		Eventually(reg.Synced).Should(BeTrue())

		By("a matching pod and one with other labels become ready")
		vllm := framework.MakePod(n, "vllm-0").Labels(map[string]string{"app": "vllm"}).Obj()
		other := framework.MakePod(n, "other-0").Labels(map[string]string{"app": "other"}).Obj()
		for pod, ip := range map[*corev1.Pod]string{vllm: "127.0.0.1", other: "127.0.0.2"} {
			Expect(env.Client.Create(ctx, pod)).To(Succeed())
			updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, ip) })
		}
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000", "vllm-0@127.0.0.1:8001"}))

		By("the pod's labels stop matching")
		update(ctx, vllm, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "retired"} })
		Eventually(workers(reg)).Should(BeEmpty())
	})
})

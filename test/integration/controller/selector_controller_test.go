package controller

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/inferpick/inferpick/controllers"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/integration/framework"
)

// startSelectorPicker runs a manager wired the way cmd/inferpick wires it
// for --endpoint-selector, and returns the registry it fills.
func startSelectorPicker(opts controllers.SelectorOptions) *registry.Registry {
	GinkgoHelper()
	scheme, err := controllers.NewScheme()
	Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  controllers.SelectorCacheOptions(opts),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	reg := registry.New()
	Expect(controllers.SetupSelectorWithManager(mgr, opts, reg)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	DeferCleanup(func() {
		cancel()
		Eventually(done).Should(BeClosed())
	})
	return reg
}

var _ = Describe("Endpoint selector controller", func() {
	It("serves the ready pods the selector matches, without an InferencePool", func(ctx SpecContext) {
		n, err := env.CreateNamespace(ctx, "selector")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(env.DeleteNamespace(ctx, n)).To(Succeed()) })
		sel, err := labels.Parse("app=vllm")
		Expect(err).NotTo(HaveOccurred())
		reg := startSelectorPicker(controllers.SelectorOptions{Namespace: n.Name, Selector: sel, Ports: []int32{8000, 8001}})
		Eventually(reg.Synced).Should(BeTrue())

		By("a matching pod and one with other labels become ready")
		vllm := framework.MakePod(n.Name, "vllm-0").Labels(map[string]string{"app": "vllm"}).Obj()
		other := framework.MakePod(n.Name, "other-0").Labels(map[string]string{"app": "other"}).Obj()
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

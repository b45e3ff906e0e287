package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/integration/framework"
)

var _ = Describe("Pool controller, one pod at a time", func() {
	var ns string

	BeforeEach(func(ctx SpecContext) {
		ns = env.Namespace(ctx, "incremental")
	})

	It("changes only the worker of the pod that changed", func(ctx SpecContext) {
		reg := startPicker(types.NamespacedName{Namespace: ns, Name: "pool"})
		Expect(env.Client.Create(ctx, framework.MakePool(ns, "pool").Ports(8000).Obj())).To(Succeed())
		pods := make([]*corev1.Pod, 3)
		for i, ip := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
			pods[i] = framework.MakePod(ns, "vllm-"+string(rune('a'+i))).Obj()
			Expect(env.Client.Create(ctx, pods[i])).To(Succeed())
			updateStatus(ctx, pods[i], func(p *corev1.Pod) { framework.SetReady(p, ip) })
		}
		Eventually(workers(reg)).Should(HaveLen(3))
		a, b, c := workerAt(reg, "127.0.0.1:8000")(), workerAt(reg, "127.0.0.2:8000")(), workerAt(reg, "127.0.0.3:8000")()
		guard := a.Admit()
		DeferCleanup(func() { guard.Release() })

		By("pod b failing its readiness probe")
		updateStatus(ctx, pods[1], func(p *corev1.Pod) { framework.SetNotReady(p, "127.0.0.2") })
		Eventually(workers(reg)).Should(Equal([]string{"vllm-a@127.0.0.1:8000", "vllm-c@127.0.0.3:8000"}))
		Expect(b.Parked()).To(BeTrue(), "its server runs on: its worker waits, out of the picks")
		Expect(workerAt(reg, "127.0.0.1:8000")()).To(BeIdenticalTo(a))
		Expect(workerAt(reg, "127.0.0.3:8000")()).To(BeIdenticalTo(c))
		Expect(a.InFlight()).To(Equal(int64(1)), "the load of an untouched worker is kept")

		By("pod c moving to another IP")
		updateStatus(ctx, pods[2], func(p *corev1.Pod) { framework.SetReady(p, "127.0.0.4") })
		Eventually(workerAt(reg, "127.0.0.4:8000")).ShouldNot(BeNil())
		Expect(c.Removed()).To(BeTrue())
		Expect(workerAt(reg, "127.0.0.3:8000")()).To(BeNil())
		Expect(workerAt(reg, "127.0.0.1:8000")()).To(BeIdenticalTo(a))

		By("an update of pod a that does not change its endpoint")
		snapshot := reg.Workers()
		update(ctx, pods[0], func(p *corev1.Pod) { p.Annotations = map[string]string{"touched": "yes"} })
		Consistently(func() []*registry.Worker { return reg.Workers() }).Should(Equal(snapshot))
		Expect(workerAt(reg, "127.0.0.1:8000")()).To(BeIdenticalTo(a))
		Expect(a.Removed()).To(BeFalse())
	})
})

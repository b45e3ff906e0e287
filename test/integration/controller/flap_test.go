package controller

import (
	"bytes"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/framework"
)

var _ = Describe("A pod's readiness flap", func() {
	poolKey := poolPerSpec("flap")

	It("keeps the pod's cache history while its server runs on, and loses it when a container restarts", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj())).To(Succeed())
		pods := map[string]*corev1.Pod{}
		for name, ip := range map[string]string{"vllm-0": "127.0.0.1", "vllm-1": "127.0.0.2"} {
			pods[ip] = framework.MakePod(poolKey.Namespace, name).Obj()
			Expect(env.Client.Create(ctx, pods[ip])).To(Succeed())
			updateStatus(ctx, pods[ip], func(p *corev1.Pod) { framework.SetReady(p, ip) })
		}
		Eventually(workers(reg)).Should(HaveLen(2))

		pol, err := policy.Build(policy.Config{}, reg)
		Expect(err).NotTo(HaveOccurred())
		req := &policy.Request{Model: "m", Prompt: [][]byte{bytes.Repeat([]byte("a long shared document "), 800)}}
		pick := func(p policy.Policy) *registry.Worker {
			GinkgoHelper()
			got, err := p.Pick(req, reg.Workers(), 1)
			Expect(err).NotTo(HaveOccurred())
			return got[0]
		}
		// coldPick is where a picker that never saw the prompt sends it.
		// (What pol routes while the warm pod is unready would warm the
		// other pod too.)
		coldPick := func() *registry.Worker {
			GinkgoHelper()
			p, err := policy.Build(policy.Config{}, reg)
			Expect(err).NotTo(HaveOccurred())
			return pick(p)
		}

		By("the prompt is cached on the pod a cold picker would not choose")
		ip := "127.0.0.1"
		if coldPick().Address() == ip+":8000" {
			ip = "127.0.0.2"
		}
		warm := workerAt(reg, ip+":8000")()
		pol.Observe(req, warm)
		Expect(pick(pol).Address()).To(Equal(warm.Address()))
		guard := warm.Admit()
		DeferCleanup(guard.Release)

		By("its readiness probe times out: it gets no picks")
		updateStatus(ctx, pods[ip], func(p *corev1.Pod) { framework.SetNotReady(p, ip) })
		Eventually(workers(reg)).Should(HaveLen(1))
		Expect(coldPick().Address()).NotTo(Equal(warm.Address()))

		By("Ready again, the same process: the prompt goes back to it")
		updateStatus(ctx, pods[ip], func(p *corev1.Pod) { framework.SetReady(p, ip) })
		Eventually(workers(reg)).Should(HaveLen(2))
		Expect(pick(pol).Address()).To(Equal(warm.Address()), "the pod came back without its cache history")
		back := workerAt(reg, warm.Address())()
		Expect(back.InFlight()).To(Equal(int64(1)), "the request from before the flap")
		_, released := guard.Release()
		Expect(released).To(BeTrue())
		Expect(back.InFlight()).To(BeZero())

		By("its container restarts: the cache is empty, and the pod comes back cold")
		restarted := func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 1 }
		updateStatus(ctx, pods[ip], func(p *corev1.Pod) { framework.SetNotReady(p, ip); restarted(p) })
		Eventually(workers(reg)).Should(HaveLen(1))
		updateStatus(ctx, pods[ip], func(p *corev1.Pod) { framework.SetReady(p, ip); restarted(p) })
		Eventually(workers(reg)).Should(HaveLen(2))
		fresh := workerAt(reg, warm.Address())()
		Expect(fresh.ID()).NotTo(Equal(back.ID()))
		Expect(pick(pol)).To(BeIdenticalTo(coldPick()), "the restarted pod kept the history of its old process")
	})

	It("keeps the pod's worker when a sidecar restarts, and makes a new one when the server's container does", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj())).To(Succeed())
		pod := framework.MakePod(poolKey.Namespace, "vllm-0").Obj()
		pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8000}}
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "istio-proxy", Image: "istio/proxyv2", Ports: []corev1.ContainerPort{{ContainerPort: 15090}}})
		Expect(env.Client.Create(ctx, pod)).To(Succeed())
		const ip = "127.0.0.1"
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, ip) })
		Eventually(workers(reg)).Should(HaveLen(1))
		warm := workerAt(reg, ip+":8000")()
		restarted := func(name string, n int32) func(*corev1.Pod) {
			return func(p *corev1.Pod) {
				for i := range p.Status.ContainerStatuses {
					if p.Status.ContainerStatuses[i].Name == name {
						p.Status.ContainerStatuses[i].RestartCount = n
					}
				}
			}
		}

		By("the mesh proxy restarts through a readiness flap: the server and its cache are the same")
		proxy := restarted("istio-proxy", 1)
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetNotReady(p, ip); proxy(p) })
		Eventually(workers(reg)).Should(BeEmpty())
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, ip); proxy(p) })
		Eventually(workers(reg)).Should(HaveLen(1))
		Expect(workerAt(reg, ip+":8000")()).To(BeIdenticalTo(warm), "a sidecar's restart made the pod's worker cold")

		By("the server's container restarts: a new, cold worker")
		server := restarted("vllm", 1)
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetNotReady(p, ip); proxy(p); server(p) })
		Eventually(workers(reg)).Should(BeEmpty())
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, ip); proxy(p); server(p) })
		Eventually(workers(reg)).Should(HaveLen(1))
		Expect(workerAt(reg, ip+":8000")().ID()).NotTo(Equal(warm.ID()))
	})
})

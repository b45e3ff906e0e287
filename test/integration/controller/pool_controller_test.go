package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	"github.com/inferpick/inferpick/controllers"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/integration/framework"
)

var _ = Describe("Pool controller", func() {
	poolKey := poolPerSpec("pool")

	// readyPod creates a pod and reports it ready at ip.
	readyPod := func(ctx SpecContext, pod *corev1.Pod, ip string) *corev1.Pod {
		GinkgoHelper()
		Expect(env.Client.Create(ctx, pod)).To(Succeed())
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, ip) })
		return pod
	}

	It("is not ready while the pool does not exist, and says so on its own Pod", func(ctx SpecContext) {
		self := framework.MakePod(poolKey.Namespace, "picker").Obj()
		Expect(env.Client.Create(ctx, self)).To(Succeed())
		reg := startPickerAs(*poolKey, &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: poolKey.Namespace, Name: self.Name, UID: self.UID})
		Eventually(objectEvents(ctx, "Pod", client.ObjectKeyFromObject(self))).Should(ConsistOf("Warning " + controllers.ReasonPoolNotFound))
		Expect(reg.Synced()).To(BeFalse())
		Expect(reg.Workers()).To(BeEmpty())

		By("the pool is created")
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj())).To(Succeed())
		Eventually(reg.Synced).Should(BeTrue())
	})

	It("adds a pod when it becomes ready, parks it while it is not ready and removes it when it is deleted", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj())).To(Succeed())
		pod := framework.MakePod(poolKey.Namespace, "vllm-0").Obj()
		Expect(env.Client.Create(ctx, pod)).To(Succeed())

		By("a pod that is not ready yet")
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetNotReady(p, "127.0.0.1") })
		Eventually(reg.Synced).Should(BeTrue())
		Consistently(workers(reg)).Should(BeEmpty())

		By("the pod becomes ready")
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, "127.0.0.1") })
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
		w := workerAt(reg, "127.0.0.1:8000")()
		Expect(w.Endpoint()).To(Equal(registry.Endpoint{
			Key:       registry.Key{UID: string(pod.UID), Port: 8000},
			Namespace: poolKey.Namespace,
			Name:      "vllm-0",
			Address:   w.Endpoint().Address,
		}))

		By("the pod fails its readiness probe: its worker is parked, out of the picks")
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetNotReady(p, "127.0.0.1") })
		Eventually(workers(reg)).Should(BeEmpty())
		Expect(w.Parked()).To(BeTrue())
		Expect(w.Removed()).To(BeFalse())

		By("ready again, then deleted: gone while it is still terminating")
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, "127.0.0.1") })
		Eventually(workerAt(reg, "127.0.0.1:8000")).Should(BeIdenticalTo(w))
		Expect(env.Client.Delete(ctx, pod)).To(Succeed())
		Eventually(workers(reg)).Should(BeEmpty())
		Expect(w.Removed()).To(BeTrue())
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		Expect(pod.DeletionTimestamp).NotTo(BeNil(), "a bound pod waits for its kubelet before it is removed")
	})

	It("treats a pod re-created at the same address as a new worker that old guards cannot touch", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj())).To(Succeed())
		first := readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.5")
		Eventually(workerAt(reg, "127.0.0.5:8000")).ShouldNot(BeNil())
		old := workerAt(reg, "127.0.0.5:8000")()
		guard := old.Admit()
		Expect(old.InFlight()).To(Equal(int64(1)))

		By("deleting the pod for good and creating it again with the same name and IP")
		Expect(env.Client.Delete(ctx, first, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(workers(reg)).Should(BeEmpty())
		second := readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.5")
		Expect(second.UID).NotTo(Equal(first.UID))
		Eventually(workerAt(reg, "127.0.0.5:8000")).ShouldNot(BeNil())
		fresh := workerAt(reg, "127.0.0.5:8000")()

		Expect(fresh).NotTo(BeIdenticalTo(old))
		Expect(fresh.ID()).NotTo(Equal(old.ID()))
		Expect(fresh.Endpoint().Key.UID).To(Equal(string(second.UID)))
		Expect(fresh.InFlight()).To(BeZero())
		Expect(old.Removed()).To(BeTrue())

		By("the request admitted on the old pod finishing")
		phase, released := guard.Release()
		Expect(released).To(BeTrue())
		Expect(phase).To(Equal(registry.Prefill))
		Expect(old.InFlight()).To(BeZero())
		Expect(fresh.InFlight()).To(BeZero())
	})

	It("removes a pod whose labels stop matching", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj())).To(Succeed())
		pod := readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.1")
		Eventually(workers(reg)).Should(HaveLen(1))

		update(ctx, pod, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "other"} })
		Eventually(workers(reg)).Should(BeEmpty())
	})

	It("resyncs when the pool's selector changes", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		pool := framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj()
		Expect(env.Client.Create(ctx, pool)).To(Succeed())
		readyPod(ctx, framework.MakePod(poolKey.Namespace, "llama").Labels(map[string]string{"model": "llama"}).Obj(), "127.0.0.1")
		readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.2")
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.2:8000"}))

		update(ctx, pool, func(p *inferencev1.InferencePool) {
			p.Spec.Selector = framework.MakePool(poolKey.Namespace, "pool").Selector(map[string]string{"model": "llama"}).Spec.Selector
		})
		Eventually(workers(reg)).Should(Equal([]string{"llama@127.0.0.1:8000"}))
	})

	It("resyncs when the target port changes", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		pool := framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj()
		Expect(env.Client.Create(ctx, pool)).To(Succeed())
		readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.1")
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
		old := workerAt(reg, "127.0.0.1:8000")()

		update(ctx, pool, func(p *inferencev1.InferencePool) {
			p.Spec.TargetPorts = framework.MakePool(poolKey.Namespace, "pool").Ports(8001).Spec.TargetPorts
		})
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8001"}))
		Expect(workerAt(reg, "127.0.0.1:8001")().Endpoint().Key.Port).To(Equal(int32(8001)))
		Expect(old.Removed()).To(BeTrue())
	})

	It("keeps each pod's workers, their requests in flight and their cache history, when the pool is edited without changing its endpoints", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		pool := framework.MakePool(poolKey.Namespace, "pool").Ports(8000, 8001).Obj()
		Expect(env.Client.Create(ctx, pool)).To(Succeed())
		readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.1")
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000", "vllm-0@127.0.0.1:8001"}))
		w8000, w8001 := workerAt(reg, "127.0.0.1:8000")(), workerAt(reg, "127.0.0.1:8001")()
		guard := w8000.Admit()
		DeferCleanup(guard.Release)
		// The prefix index and the scraped metrics are the worker object's
		// (the index knows it by its ID): the same object keeps them.
		same := func() []*registry.Worker {
			return []*registry.Worker{workerAt(reg, "127.0.0.1:8000")(), workerAt(reg, "127.0.0.1:8001")()}
		}

		By("labels, annotations and the endpoint picker reference change")
		update(ctx, pool, func(p *inferencev1.InferencePool) {
			p.Labels = map[string]string{"team": "serving"}
			p.Annotations = map[string]string{"note": "edited"}
			p.Spec.EndpointPickerRef = framework.MakePool(poolKey.Namespace, "pool").Picker("picker", 9002).Spec.EndpointPickerRef
		})
		Consistently(same).Should(HaveExactElements(BeIdenticalTo(w8000), BeIdenticalTo(w8001)))

		By("the target ports are reordered")
		update(ctx, pool, func(p *inferencev1.InferencePool) {
			p.Spec.TargetPorts = framework.MakePool(poolKey.Namespace, "pool").Ports(8001, 8000).Spec.TargetPorts
		})
		Eventually(func() []int {
			ws := same()
			return []int{ws[0].Endpoint().Rank, ws[1].Endpoint().Rank}
		}).Should(Equal([]int{1, 0}), "each port takes the rank of its new place")
		Expect(same()).To(HaveExactElements(BeIdenticalTo(w8000), BeIdenticalTo(w8001)), "the reorder replaced a worker")
		Expect(w8000.Removed()).To(BeFalse())
		Expect(w8001.Removed()).To(BeFalse())
		Expect(w8000.InFlight()).To(Equal(int64(1)))

		By("a port is added: only it gets a new worker")
		update(ctx, pool, func(p *inferencev1.InferencePool) {
			p.Spec.TargetPorts = framework.MakePool(poolKey.Namespace, "pool").Ports(8001, 8000, 8002).Spec.TargetPorts
		})
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000", "vllm-0@127.0.0.1:8001", "vllm-0@127.0.0.1:8002"}))
		Expect(same()).To(HaveExactElements(BeIdenticalTo(w8000), BeIdenticalTo(w8001)))
		Expect(w8000.InFlight()).To(Equal(int64(1)))
	})

	It("serves on each pod the target ports its active-ports annotation lists, and follows its edits", func(ctx SpecContext) {
		const gie, llmd = "inference.networking.k8s.io/active-ports", "llm-d.ai/active-ports"
		reg := startPicker(*poolKey)
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000, 8001).Obj())).To(Succeed())
		pod := readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.1")
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000", "vllm-0@127.0.0.1:8001"}))
		w8000, w8001 := workerAt(reg, "127.0.0.1:8000")(), workerAt(reg, "127.0.0.1:8001")()
		guard := w8001.Admit()
		DeferCleanup(guard.Release)

		By("the annotation lists port 8000 alone: 8001's worker leaves, its request still counted on it")
		update(ctx, pod, func(p *corev1.Pod) { p.Annotations = map[string]string{gie: "8000"} })
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
		Expect(workerAt(reg, "127.0.0.1:8000")()).To(BeIdenticalTo(w8000), "the other port's worker was replaced")
		Expect(w8001.Removed()).To(BeTrue())
		Expect(w8001.InFlight()).To(Equal(int64(1)))

		By("llm-d's key lists both, and is read over the upstream one: 8001 is back with rank 1")
		update(ctx, pod, func(p *corev1.Pod) { p.Annotations = map[string]string{gie: "8000", llmd: "8001, 8000"} })
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000", "vllm-0@127.0.0.1:8001"}))
		Expect(workerAt(reg, "127.0.0.1:8000")()).To(BeIdenticalTo(w8000))
		Expect(workerAt(reg, "127.0.0.1:8001")().Endpoint().Rank).To(Equal(1))

		By("the annotation is emptied: the pod serves no port")
		update(ctx, pod, func(p *corev1.Pod) { p.Annotations = map[string]string{llmd: ""} })
		Eventually(workers(reg)).Should(BeEmpty())

		By("the annotation is removed: every target port again")
		update(ctx, pod, func(p *corev1.Pod) { p.Annotations = nil })
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000", "vllm-0@127.0.0.1:8001"}))
	})

	It("reads each port's own metrics while the pool has several target ports, keeping the first port's worker as ports come and go", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		pool := framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj()
		Expect(env.Client.Create(ctx, pool)).To(Succeed())
		readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.1")
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
		w := workerAt(reg, "127.0.0.1:8000")()
		Expect(w.OwnMetrics()).To(BeFalse(), "one target port: --model-server-metrics-port applies")

		By("a second target port")
		update(ctx, pool, func(p *inferencev1.InferencePool) {
			p.Spec.TargetPorts = framework.MakePool(poolKey.Namespace, "pool").Ports(8000, 8001).Spec.TargetPorts
		})
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000", "vllm-0@127.0.0.1:8001"}))
		Eventually(w.OwnMetrics).Should(BeTrue())
		Expect(workerAt(reg, "127.0.0.1:8000")()).To(BeIdenticalTo(w))
		Expect(workerAt(reg, "127.0.0.1:8001")().OwnMetrics()).To(BeTrue())

		By("back to one")
		update(ctx, pool, func(p *inferencev1.InferencePool) {
			p.Spec.TargetPorts = framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Spec.TargetPorts
		})
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
		Eventually(w.OwnMetrics).Should(BeFalse())
		Expect(workerAt(reg, "127.0.0.1:8000")()).To(BeIdenticalTo(w))
	})

	It("gives each pod one endpoint per target port", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000, 8001).Obj())).To(Succeed())
		readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.1")
		readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-1").Obj(), "127.0.0.2")
		Eventually(workers(reg)).Should(Equal([]string{
			"vllm-0@127.0.0.1:8000", "vllm-0@127.0.0.1:8001",
			"vllm-1@127.0.0.2:8000", "vllm-1@127.0.0.2:8001",
		}))
	})

	It("ignores matching pods in other namespaces and other pools", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		other := env.Namespace(ctx, "other")

		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj())).To(Succeed())
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "another-pool").Ports(9000).Obj())).To(Succeed())
		readyPod(ctx, framework.MakePod(other, "elsewhere").Obj(), "127.0.0.9")
		readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.1")
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
		Consistently(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
	})

	It("empties the registry when the pool is deleted, and fills it when the pool returns", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		pool := framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj()
		Expect(env.Client.Create(ctx, pool)).To(Succeed())
		readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.1")
		Eventually(workers(reg)).Should(HaveLen(1))

		Expect(env.Client.Delete(ctx, pool)).To(Succeed())
		Eventually(workers(reg)).Should(BeEmpty())
		Eventually(reg.Synced).Should(BeFalse(), "not ready without the pool")

		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj())).To(Succeed())
		Eventually(workers(reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
	})

	It("records Events on the pool when the ready endpoints change", func(ctx SpecContext) {
		startPicker(*poolKey)
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj())).To(Succeed())
		Eventually(poolEvents(ctx, *poolKey)).Should(ConsistOf("Warning " + controllers.ReasonNoReadyEndpoints))

		pod := readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.1")
		Eventually(poolEvents(ctx, *poolKey)).Should(ContainElement("Normal " + controllers.ReasonEndpointsChanged))

		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetNotReady(p, "127.0.0.1") })
		Eventually(func(g Gomega) int {
			n := 0
			for _, e := range poolEvents(ctx, *poolKey)(g) {
				if e == "Warning "+controllers.ReasonNoReadyEndpoints {
					n++
				}
			}
			return n
		}).Should(Equal(2))
	})

	It("ends a rolling restart of many pods with an Event that states the count", func(ctx SpecContext) {
		startPicker(*poolKey)
		Expect(env.Client.Create(ctx, framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Obj())).To(Succeed())
		const n = 16
		old := make([]*corev1.Pod, n)
		for i := range old {
			old[i] = readyPod(ctx, framework.MakePod(poolKey.Namespace, fmt.Sprintf("old-%d", i)).Obj(), fmt.Sprintf("127.0.1.%d", i+1))
		}
		Eventually(lastPoolEvent(ctx, *poolKey)).Should(MatchRegexp(`\b%d ready endpoints( \(was \d+\))?$`, n))

		By("each new pod is ready before an old one goes, each change seen on the pool before the next")
		for i := range n {
			readyPod(ctx, framework.MakePod(poolKey.Namespace, fmt.Sprintf("new-%d", i)).Obj(), fmt.Sprintf("127.0.2.%d", i+1))
			Eventually(lastPoolEvent(ctx, *poolKey)).Should(HaveSuffix(fmt.Sprintf("%d ready endpoints (was %d)", n+1, n)), "new pod %d", i)
			Expect(env.Client.Delete(ctx, old[i], client.GracePeriodSeconds(0))).To(Succeed())
			Eventually(lastPoolEvent(ctx, *poolKey)).Should(HaveSuffix(fmt.Sprintf("%d ready endpoints (was %d)", n, n+1)), "old pod %d gone", i)
		}
	})

	It("selects nothing and warns when a selector key is invalid", func(ctx SpecContext) {
		reg := startPicker(*poolKey)
		readyPod(ctx, framework.MakePod(poolKey.Namespace, "vllm-0").Obj(), "127.0.0.1")
		bad := framework.MakePool(poolKey.Namespace, "pool").Ports(8000).Selector(map[string]string{"bad key!": "vllm"}).Obj()
		Expect(env.Client.Create(ctx, bad)).To(Succeed())

		Eventually(poolEvents(ctx, *poolKey)).Should(ContainElement("Warning " + controllers.ReasonInvalidSelector))
		Expect(reg.Synced()).To(BeTrue())
		Expect(workers(reg)()).To(BeEmpty())
	})
})

// lastPoolEvent is the Event on the pool that `kubectl describe` lists last
// (the latest by lastTimestamp; of those, the last written), as "Type
// Reason: message".
func lastPoolEvent(ctx context.Context, pool types.NamespacedName) func(Gomega) string {
	return func(g Gomega) string {
		var list corev1.EventList
		g.Expect(env.Client.List(ctx, &list, client.InNamespace(pool.Namespace))).To(Succeed())
		evs := slices.DeleteFunc(list.Items, func(e corev1.Event) bool {
			return e.InvolvedObject.Kind != "InferencePool" || e.InvolvedObject.Name != pool.Name
		})
		g.Expect(evs).NotTo(BeEmpty())
		last := slices.MaxFunc(evs, func(a, b corev1.Event) int {
			if c := a.LastTimestamp.Compare(b.LastTimestamp.Time); c != 0 {
				return c
			}
			ra, _ := strconv.ParseUint(a.ResourceVersion, 10, 64)
			rb, _ := strconv.ParseUint(b.ResourceVersion, 10, 64)
			return cmp.Compare(ra, rb)
		})
		return last.Type + " " + last.Reason + ": " + last.Message
	}
}

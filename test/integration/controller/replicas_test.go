package controller

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferpick/inferpick/controllers"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/integration/framework"
)

// electedReplica is one picker replica under leader election.
type electedReplica struct {
	reg    *registry.Registry
	leader controllers.Leader
	stop   func()
}

// startReplica runs a picker replica of pool under active-passive leader
// election, with short lease timings.
func startReplica(pool types.NamespacedName) *electedReplica {
	GinkgoHelper()
	sinks := newSinks()
	leader, stop := startApp(sinks, nil, append(poolArgs(pool),
		"--ha-enable-leader-election", "--ha-mode", "active-passive",
		"--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s",
		"--leader-election-retry-period", "200ms")...)
	return &electedReplica{reg: sinks.Endpoints.(*registry.Registry), leader: leader, stop: stop}
}

// poolMessages returns, of each Event object on the pool, its message (the
// latest Event's) and count, "message ×count": a replica records all the
// Events of one reason as one object, so two replicas recording the same
// change would show it in two objects, or count it twice.
func poolMessages(ctx context.Context, pool types.NamespacedName) func(Gomega) []string {
	return func(g Gomega) []string {
		var list corev1.EventList
		g.Expect(env.Client.List(ctx, &list, client.InNamespace(pool.Namespace))).To(Succeed())
		var out []string
		for i := range list.Items {
			e := &list.Items[i]
			if e.InvolvedObject.Kind != "InferencePool" || e.InvolvedObject.Name != pool.Name {
				continue
			}
			out = append(out, fmt.Sprintf("%s ×%d", e.Message, max(e.Count, 1)))
		}
		return out
	}
}

var _ = Describe("Replicas under leader election", func() {
	It("all route, and only the leader records Events on the pool", func(ctx SpecContext) {
		n := env.Namespace(ctx, "replicas")
		pool := types.NamespacedName{Namespace: n, Name: "pool"}
		Expect(env.Client.Create(ctx, framework.MakePool(pool.Namespace, pool.Name).Ports(8000).Obj())).To(Succeed())
		var pods []*corev1.Pod
		for i, ip := range []string{"127.0.0.1", "127.0.0.2"} {
			pod := framework.MakePod(pool.Namespace, "vllm-"+string(rune('0'+i))).Obj()
			Expect(env.Client.Create(ctx, pod)).To(Succeed())
			updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, ip) })
			pods = append(pods, pod)
		}

		a := startReplica(pool)
		Eventually(a.leader.Leading).Should(BeTrue())
		b := startReplica(pool)
		Consistently(b.leader.Leading).Should(BeFalse())

		By("both replicas route over both pods")
		Eventually(workers(a.reg)).Should(HaveLen(2))
		Eventually(workers(b.reg)).Should(HaveLen(2))
		Eventually(poolMessages(ctx, pool)).Should(ConsistOf("2 ready endpoints ×1"))
		Consistently(poolMessages(ctx, pool)).Should(ConsistOf("2 ready endpoints ×1"))

		By("a pod goes away: both replicas drop it, one Event says so")
		Expect(env.Client.Delete(ctx, pods[1], client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(workers(a.reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
		Eventually(workers(b.reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
		Eventually(poolMessages(ctx, pool)).Should(ConsistOf("1 ready endpoints (was 2) ×2"))
		Consistently(poolMessages(ctx, pool)).Should(ConsistOf("1 ready endpoints (was 2) ×2"))

		By("the leader stops: the other takes the lease and announces what it sees, once")
		a.stop()
		Eventually(b.leader.Leading).Should(BeTrue())
		Eventually(poolMessages(ctx, pool)).Should(ConsistOf("1 ready endpoints (was 2) ×2", "1 ready endpoints ×1"))
		pod := framework.MakePod(pool.Namespace, "vllm-2").Obj()
		Expect(env.Client.Create(ctx, pod)).To(Succeed())
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, "127.0.0.3") })
		Eventually(workers(b.reg)).Should(HaveLen(2))
		Eventually(poolMessages(ctx, pool)).Should(ConsistOf("1 ready endpoints (was 2) ×2", "2 ready endpoints (was 1) ×2"))
		Consistently(poolMessages(ctx, pool)).Should(ConsistOf("1 ready endpoints (was 2) ×2", "2 ready endpoints (was 1) ×2"))
	})
})

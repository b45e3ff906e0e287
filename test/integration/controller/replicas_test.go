package controller

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/inferpick/inferpick/controllers"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/integration/framework"
)

// electedReplica is one picker replica under leader election.
type electedReplica struct {
	reg     *registry.Registry
	elected <-chan struct{}
	stop    func()
}

// startReplica runs a manager wired like cmd/inferpick's with leader
// election on the Lease named lease in the pool's namespace.
func startReplica(pool types.NamespacedName, lease string) *electedReplica {
	GinkgoHelper()
	scheme, err := controllers.NewScheme()
	Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         controllers.CacheOptions(pool),
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		Controller:                    config.Controller{SkipNameValidation: ptr.To(true)},
		LeaderElection:                true,
		LeaderElectionID:              lease,
		LeaderElectionNamespace:       pool.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(3 * time.Second),
		RenewDeadline:                 ptr.To(2 * time.Second),
		RetryPeriod:                   ptr.To(200 * time.Millisecond),
	})
	Expect(err).NotTo(HaveOccurred())
	r := &electedReplica{reg: registry.New(), elected: mgr.Elected()}
	Expect(controllers.SetupWithManager(mgr, controllers.PoolReconcilerOptions{Pool: pool}, r.reg)).To(Succeed())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	r.stop = func() {
		cancel()
		Eventually(done).Should(BeClosed())
	}
	DeferCleanup(r.stop)
	return r
}

// poolMessages returns the messages of the Events on the pool, once per
// occurrence: two replicas recording the same change would show it twice.
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
			for range max(e.Count, 1) {
				out = append(out, e.Message)
			}
		}
		return out
	}
}

var _ = Describe("Replicas under leader election", func() {
	It("all route, and only the leader records Events on the pool", func(ctx SpecContext) {
		n, err := env.CreateNamespace(ctx, "replicas")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(env.DeleteNamespace(ctx, n)).To(Succeed()) })
		pool := types.NamespacedName{Namespace: n.Name, Name: "pool"}
		Expect(env.Client.Create(ctx, framework.MakePool(pool.Namespace, pool.Name).Ports(8000).Obj())).To(Succeed())
		var pods []*corev1.Pod
		for i, ip := range []string{"127.0.0.1", "127.0.0.2"} {
			pod := framework.MakePod(pool.Namespace, "vllm-"+string(rune('0'+i))).Obj()
			Expect(env.Client.Create(ctx, pod)).To(Succeed())
			updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, ip) })
			pods = append(pods, pod)
		}

		a := startReplica(pool, "inferpick-pool")
		Eventually(a.elected).Should(BeClosed())
		b := startReplica(pool, "inferpick-pool")
		Consistently(b.elected).ShouldNot(BeClosed())

		By("both replicas route over both pods")
		Eventually(workers(a.reg)).Should(HaveLen(2))
		Eventually(workers(b.reg)).Should(HaveLen(2))
		Eventually(poolMessages(ctx, pool)).Should(ConsistOf("2 ready endpoints"))
		Consistently(poolMessages(ctx, pool)).Should(ConsistOf("2 ready endpoints"))

		By("a pod goes away: both replicas drop it, one Event says so")
		Expect(env.Client.Delete(ctx, pods[1], client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(workers(a.reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
		Eventually(workers(b.reg)).Should(Equal([]string{"vllm-0@127.0.0.1:8000"}))
		Eventually(poolMessages(ctx, pool)).Should(ConsistOf("2 ready endpoints", "1 ready endpoints (was 2)"))
		Consistently(poolMessages(ctx, pool)).Should(HaveLen(2))

		By("the leader stops: the other takes the lease and announces what it sees, once")
		a.stop()
		Eventually(b.elected).Should(BeClosed())
		Eventually(poolMessages(ctx, pool)).Should(ConsistOf("2 ready endpoints", "1 ready endpoints (was 2)", "1 ready endpoints"))
		pod := framework.MakePod(pool.Namespace, "vllm-2").Obj()
		Expect(env.Client.Create(ctx, pod)).To(Succeed())
		updateStatus(ctx, pod, func(p *corev1.Pod) { framework.SetReady(p, "127.0.0.3") })
		Eventually(workers(b.reg)).Should(HaveLen(2))
		Eventually(poolMessages(ctx, pool)).Should(ConsistOf("2 ready endpoints", "1 ready endpoints (was 2)", "1 ready endpoints", "2 ready endpoints (was 1)"))
		Consistently(poolMessages(ctx, pool)).Should(HaveLen(4))
	})
})

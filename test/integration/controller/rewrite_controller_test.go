package controller

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencev1alpha2 "github.com/inferpick/inferpick/api/v1alpha2"
	"github.com/inferpick/inferpick/picker/rewrite"
)

var _ = Describe("Model rewrite controller", func() {
	poolKey := poolPerSpec("rewrite")

	// modelRewrite sends the requests for model (every model when "") of
	// pool to the targets.
	modelRewrite := func(name, pool, model string, targets ...inferencev1alpha2.TargetModel) *inferencev1alpha2.InferenceModelRewrite {
		rule := inferencev1alpha2.InferenceModelRewriteRule{Targets: targets}
		if model != "" {
			rule.Matches = []inferencev1alpha2.Match{{Model: &inferencev1alpha2.ModelMatch{Value: model}}}
		}
		return &inferencev1alpha2.InferenceModelRewrite{
			ObjectMeta: metav1.ObjectMeta{Namespace: poolKey.Namespace, Name: name},
			Spec: inferencev1alpha2.InferenceModelRewriteSpec{
				PoolRef: &inferencev1alpha2.PoolObjectReference{Name: inferencev1alpha2.ObjectName(pool)},
				Rules:   []inferencev1alpha2.InferenceModelRewriteRule{rule},
			},
		}
	}
	target := func(model string, weight int32) inferencev1alpha2.TargetModel {
		return inferencev1alpha2.TargetModel{ModelRewrite: model, Weight: weight}
	}

	It("keeps the table equal to the served pool's rewrites", func(ctx SpecContext) {
		tbl := startRewrites(*poolKey)

		By("a rewrite for the served pool applies to its model")
		canary := modelRewrite("canary", "pool", "food-review", target("food-review-v1", 1))
		Expect(env.Client.Create(ctx, canary)).To(Succeed())
		Eventually(targetOf(tbl, "food-review")).Should(Equal("food-review-v1"))
		Expect(targetOf(tbl, "other")()).To(BeEmpty())

		By("the rewrite is marked Accepted for its generation")
		Eventually(acceptedGeneration(ctx, canary)).Should(Equal(int64(1)))

		By("an update of the targets is followed")
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(canary), canary)).To(Succeed())
		canary.Spec.Rules[0].Targets = []inferencev1alpha2.TargetModel{target("food-review-v2", 1)}
		Expect(env.Client.Update(ctx, canary)).To(Succeed())
		Eventually(targetOf(tbl, "food-review")).Should(Equal("food-review-v2"))
		Eventually(acceptedGeneration(ctx, canary)).Should(Equal(int64(2)))

		By("a rewrite for another pool is ignored and left without status")
		elsewhere := modelRewrite("elsewhere", "other-pool", "chat", target("chat-v2", 1))
		Expect(env.Client.Create(ctx, elsewhere)).To(Succeed())
		// The rewrite created after it is seen, so the ignored one was reconciled too.
		Expect(env.Client.Create(ctx, modelRewrite("marker", "pool", "marker", target("marker-v2", 1)))).To(Succeed())
		Eventually(targetOf(tbl, "marker")).Should(Equal("marker-v2"))
		Consistently(targetOf(tbl, "chat")).Should(BeEmpty())
		Expect(acceptedGeneration(ctx, elsewhere)()).To(Equal(int64(-1)))

		By("pointing the rewrite at another pool removes its rules, and the picker no longer says they apply")
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(canary), canary)).To(Succeed())
		canary.Spec.PoolRef.Name = "other-pool"
		Expect(env.Client.Update(ctx, canary)).To(Succeed())
		Eventually(targetOf(tbl, "food-review")).Should(BeEmpty())
		Eventually(acceptedBy(ctx, canary)).Should(BeEmpty())

		By("a deleted rewrite is forgotten")
		Expect(env.Client.Delete(ctx, modelRewrite("marker", "pool", "marker"))).To(Succeed())
		Eventually(targetOf(tbl, "marker")).Should(BeEmpty())
	})

	It("runs on every replica: each follows the rewrites, and they agree on the status", func(ctx SpecContext) {
		replicas := []*rewrite.Table{startRewrites(*poolKey), startRewrites(*poolKey), startRewrites(*poolKey)}
		canary := modelRewrite("canary", "pool", "food-review", target("food-review-v1", 1))
		Expect(env.Client.Create(ctx, canary)).To(Succeed())
		for gen := int64(1); gen <= 3; gen++ {
			want := fmt.Sprintf("food-review-v%d", gen)
			for _, tbl := range replicas {
				Eventually(targetOf(tbl, "food-review")).Should(Equal(want))
			}
			Eventually(acceptedGeneration(ctx, canary)).Should(Equal(gen))
			Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(canary), canary)).To(Succeed())
			canary.Spec.Rules[0].Targets = []inferencev1alpha2.TargetModel{target(fmt.Sprintf("food-review-v%d", gen+1), 1)}
			Expect(env.Client.Update(ctx, canary)).To(Succeed())
		}
	})

	It("under an election writes the status from the leader alone, and from a new leader at once", func(ctx SpecContext) {
		// Another replica holds the lease.
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: poolKey.Namespace, Name: "inferpick-pool"},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To("another-replica"),
				LeaseDurationSeconds: ptr.To(int32(3600)),
				RenewTime:            &metav1.MicroTime{Time: time.Now()},
			},
		}
		Expect(env.Client.Create(ctx, lease)).To(Succeed())
		sinks := newSinks()
		leader, _ := startApp(sinks, nil, append(poolArgs(*poolKey),
			"--ha-enable-leader-election", "--ha-mode", "active-active",
			"--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s",
			"--leader-election-retry-period", "200ms")...)
		tbl := sinks.Rewrites.(*rewrite.Table)

		By("a replica that does not lead routes by the rewrite and leaves its status to the leader")
		canary := modelRewrite("canary", "pool", "food-review", target("food-review-v1", 1))
		Expect(env.Client.Create(ctx, canary)).To(Succeed())
		Eventually(targetOf(tbl, "food-review")).Should(Equal("food-review-v1"))
		Consistently(acceptedGeneration(ctx, canary)).Should(Equal(int64(-1)))
		Expect(leader.Leading()).To(BeFalse())

		By("the other replica gives the lease up: this one takes it and writes the status it left")
		Expect(env.Client.Delete(ctx, lease)).To(Succeed())
		Eventually(leader.Leading).Should(BeTrue())
		Eventually(acceptedGeneration(ctx, canary)).Should(Equal(int64(1)))
	})

	It("moves the Accepted condition with the rewrite to another pool's picker", func(ctx SpecContext) {
		here := startRewrites(*poolKey)
		there := startRewrites(types.NamespacedName{Namespace: poolKey.Namespace, Name: "other-pool"})
		canary := modelRewrite("canary", "pool", "food-review", target("food-review-v1", 1))
		Expect(env.Client.Create(ctx, canary)).To(Succeed())
		Eventually(targetOf(here, "food-review")).Should(Equal("food-review-v1"))
		Eventually(acceptedBy(ctx, canary)).Should(Equal("The rules apply to the requests of pool pool (generation 1)"))

		By("the rewrite moves to the other pool: its picker says so, and this one leaves that be")
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(canary), canary)).To(Succeed())
		canary.Spec.PoolRef.Name = "other-pool"
		Expect(env.Client.Update(ctx, canary)).To(Succeed())
		Eventually(targetOf(there, "food-review")).Should(Equal("food-review-v1"))
		Eventually(targetOf(here, "food-review")).Should(BeEmpty())
		Eventually(acceptedBy(ctx, canary)).Should(Equal("The rules apply to the requests of pool other-pool (generation 2)"))
		// A later rewrite of this pool is reconciled after the moved one.
		Expect(env.Client.Create(ctx, modelRewrite("marker", "pool", "marker", target("marker-v2", 1)))).To(Succeed())
		Eventually(targetOf(here, "marker")).Should(Equal("marker-v2"))
		Consistently(acceptedBy(ctx, canary)).Should(Equal("The rules apply to the requests of pool other-pool (generation 2)"))
	})

	It("lets the older rewrite win a model, and an exact match win over a catch-all", func(ctx SpecContext) {
		tbl := startRewrites(*poolKey)

		Expect(env.Client.Create(ctx, modelRewrite("first", "pool", "chat", target("chat-first", 1)))).To(Succeed())
		Eventually(targetOf(tbl, "chat")).Should(Equal("chat-first"))
		Expect(env.Client.Create(ctx, modelRewrite("catch-all", "pool", "", target("default-model", 1)))).To(Succeed())
		Eventually(targetOf(tbl, "anything")).Should(Equal("default-model"))
		// Creation timestamps have a resolution of one second.
		Eventually(func() bool {
			later := &inferencev1alpha2.InferenceModelRewrite{}
			Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: poolKey.Namespace, Name: "catch-all"}, later)).To(Succeed())
			return metav1.Now().Unix() > later.CreationTimestamp.Unix()
		}).Should(BeTrue())
		Expect(env.Client.Create(ctx, modelRewrite("second", "pool", "chat", target("chat-second", 1)))).To(Succeed())
		Expect(env.Client.Create(ctx, modelRewrite("marker", "pool", "marker", target("marker-v2", 1)))).To(Succeed())
		Eventually(targetOf(tbl, "marker")).Should(Equal("marker-v2"))
		Expect(targetOf(tbl, "chat")()).To(Equal("chat-first"))

		By("the newer rewrite takes over when the older one goes")
		Expect(env.Client.Delete(ctx, modelRewrite("first", "pool", ""))).To(Succeed())
		Eventually(targetOf(tbl, "chat")).Should(Equal("chat-second"))
	})
})

// targetOf is the model a request for model goes to, "" when no rule
// matches.
func targetOf(tbl *rewrite.Table, model string) func() string {
	return func() string {
		d, _ := tbl.Rewrite(model, "request-1")
		return d.Model
	}
}

// acceptedGeneration is the generation the rewrite's Accepted=True
// condition was set for, -1 when it has none.
func acceptedGeneration(ctx context.Context, rw *inferencev1alpha2.InferenceModelRewrite) func() int64 {
	return func() int64 {
		got := &inferencev1alpha2.InferenceModelRewrite{}
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rw), got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, string(inferencev1alpha2.RewriteConditionAccepted))
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(inferencev1alpha2.RewriteReasonAccepted) {
			return -1
		}
		return c.ObservedGeneration
	}
}

// acceptedBy is the message of the rewrite's Accepted=True condition and
// the generation it was set for, "" when it has none.
func acceptedBy(ctx context.Context, rw *inferencev1alpha2.InferenceModelRewrite) func() string {
	return func() string {
		got := &inferencev1alpha2.InferenceModelRewrite{}
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rw), got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, string(inferencev1alpha2.RewriteConditionAccepted))
		if c == nil || c.Status != metav1.ConditionTrue {
			return ""
		}
		return fmt.Sprintf("%s (generation %d)", c.Message, c.ObservedGeneration)
	}
}

// startRewrites runs a picker for pool and returns its rewrite table.
func startRewrites(pool types.NamespacedName) *rewrite.Table {
	GinkgoHelper()
	sinks := newSinks()
	startApp(sinks, nil, poolArgs(pool)...)
	return sinks.Rewrites.(*rewrite.Table)
}

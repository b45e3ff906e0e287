package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	inferencev1alpha2 "github.com/inferpick/inferpick/api/v1alpha2"
	"github.com/inferpick/inferpick/picker/flowcontrol"
)

var _ = Describe("Objective controller", func() {
	poolKey := poolPerSpec("objective")

	objective := func(name, pool string, prio *int) *inferencev1alpha2.InferenceObjective {
		return &inferencev1alpha2.InferenceObjective{
			ObjectMeta: metav1.ObjectMeta{Namespace: poolKey.Namespace, Name: name},
			Spec: inferencev1alpha2.InferenceObjectiveSpec{
				Priority: prio,
				PoolRef:  inferencev1alpha2.PoolObjectReference{Name: inferencev1alpha2.ObjectName(pool)},
			},
		}
	}

	It("tracks the priorities of the served pool's objectives", func(ctx SpecContext) {
		prios := startObjectives(*poolKey)

		By("an objective for the served pool appears with its priority")
		chat := objective("chat", "pool", ptr.To(10))
		Expect(env.Client.Create(ctx, chat)).To(Succeed())
		Eventually(priorityOf(prios, "chat")).Should(Equal(known(10)))

		By("an objective without a priority counts as 0")
		Expect(env.Client.Create(ctx, objective("plain", "pool", nil))).To(Succeed())
		Eventually(priorityOf(prios, "plain")).Should(Equal(known(0)))

		By("an objective for another pool is ignored")
		Expect(env.Client.Create(ctx, objective("elsewhere", "other-pool", ptr.To(5)))).To(Succeed())
		// The objective created after it is seen, so the ignored one was reconciled too.
		Expect(env.Client.Create(ctx, objective("marker", "pool", ptr.To(1)))).To(Succeed())
		Eventually(priorityOf(prios, "marker")).Should(Equal(known(1)))
		Consistently(priorityOf(prios, "elsewhere")).Should(Equal(lookup{}))

		By("a priority update is reflected")
		chat.Spec.Priority = ptr.To(-3)
		Expect(env.Client.Update(ctx, chat)).To(Succeed())
		Eventually(priorityOf(prios, "chat")).Should(Equal(known(-3)))

		By("pointing the objective at another pool removes it")
		chat.Spec.PoolRef.Name = "other-pool"
		Expect(env.Client.Update(ctx, chat)).To(Succeed())
		Eventually(priorityOf(prios, "chat")).Should(Equal(lookup{}))

		By("a deleted objective is forgotten")
		Expect(env.Client.Delete(ctx, objective("plain", "pool", nil))).To(Succeed())
		Eventually(priorityOf(prios, "plain")).Should(Equal(lookup{}))
		Expect(priorityOf(prios, "marker")()).To(Equal(known(1)))
	})

	It("keeps a static priority that no objective of the served pool replaces", func(ctx SpecContext) {
		prios := startObjectives(*poolKey)
		prios.SetStatic("batch", -1) // as --objective-priorities batch=-1,chat=2 does
		prios.SetStatic("chat", 2)

		By("another pool's objective of the same name leaves the static priority")
		Expect(env.Client.Create(ctx, objective("batch", "other-pool", ptr.To(5)))).To(Succeed())
		Expect(env.Client.Create(ctx, objective("marker", "pool", ptr.To(1)))).To(Succeed())
		Eventually(priorityOf(prios, "marker")).Should(Equal(known(1)))
		Consistently(priorityOf(prios, "batch")).Should(Equal(known(-1)))

		By("the served pool's objective of the same name takes its place")
		chat := objective("chat", "pool", ptr.To(10))
		Expect(env.Client.Create(ctx, chat)).To(Succeed())
		Eventually(priorityOf(prios, "chat")).Should(Equal(known(10)))

		By("deleting that objective brings the static priority back")
		Expect(env.Client.Delete(ctx, chat)).To(Succeed())
		Eventually(priorityOf(prios, "chat")).Should(Equal(known(2)))
	})
})

type lookup struct {
	Priority int
	Known    bool
}

func known(p int) lookup { return lookup{Priority: p, Known: true} }

func priorityOf(p *flowcontrol.Priorities, name string) func() lookup {
	return func() lookup {
		v, ok := p.Priority(name)
		return lookup{v, ok}
	}
}

// startObjectives runs a manager wired the way cmd/inferpick wires it and
// returns the objective priorities it fills.
func startObjectives(pool types.NamespacedName) *flowcontrol.Priorities {
	GinkgoHelper()
	_, prios := startManager(pool, nil)
	return prios
}

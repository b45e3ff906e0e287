package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferpick/inferpick/controllers"
	"github.com/inferpick/inferpick/test/integration/framework"
)

var _ = Describe("The CRD check at start", func() {
	It("finds the installed InferencePool CRD", func() {
		Expect(controllers.CheckCRD(env.Config)).To(Succeed())
	})

	It("explains what to do when a CRD is missing, in the log and on the picker's Pod", func(ctx SpecContext) {
		err := controllers.CheckServed(env.Config, schema.GroupVersion{Group: "inference.networking.k8s.io", Version: "v9"}, "inferencepools")
		Expect(err).To(MatchError(controllers.ErrCRDMissing))
		Expect(err.Error()).To(And(ContainSubstring("install it with the chart"), ContainSubstring("kubectl apply")))

		n := env.Namespace(ctx, "crd")
		self := framework.MakePod(n, "picker").Obj()
		Expect(env.Client.Create(ctx, self)).To(Succeed())
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: n, Name: self.Name, UID: self.UID}
		Expect(controllers.RecordOnSelf(ctx, env.Client, ref, controllers.ReasonCRDMissing, err.Error())).To(Succeed())
		Eventually(objectEvents(ctx, "Pod", client.ObjectKeyFromObject(self))).Should(ConsistOf("Warning " + controllers.ReasonCRDMissing))
	})
})

package crd

import (
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencev1alpha2 "github.com/inferpick/inferpick/api/v1alpha2"
)

// validRewrite canaries an adapter: 90% of its requests stay on v1, 10% go
// to v2.
func validRewrite(namespace string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": inferencev1alpha2.GroupVersion.String(),
		"kind":       "InferenceModelRewrite",
		"metadata":   map[string]any{"generateName": "rewrite-", "namespace": namespace},
		"spec": map[string]any{
			"poolRef": map[string]any{"name": "pool"},
			"rules": []any{map[string]any{
				"matches": []any{map[string]any{"model": map[string]any{"value": "food-review"}}},
				"targets": []any{
					map[string]any{"modelRewrite": "food-review-v1", "weight": int64(90)},
					map[string]any{"modelRewrite": "food-review-v2", "weight": int64(10)},
				},
			}},
		},
	}}
}

func targets(weights ...int64) []any {
	out := make([]any, 0, len(weights))
	for _, w := range weights {
		out = append(out, map[string]any{"modelRewrite": "m", "weight": w})
	}
	return out
}

var _ = Describe("InferenceModelRewrite validation", func() {
	var ns string

	BeforeEach(func(ctx SpecContext) {
		ns = env.Namespace(ctx, "crd-rewrite")
	})

	It("accepts a valid rewrite and applies the defaults", func(ctx SpecContext) {
		Expect(env.Client.Create(ctx, validRewrite(ns))).To(Succeed())

		var list inferencev1alpha2.InferenceModelRewriteList
		Expect(env.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(HaveLen(1))
		rw := list.Items[0]
		Expect(rw.Spec.PoolRef.Group).To(Equal(inferencev1alpha2.Group("inference.networking.k8s.io")))
		Expect(rw.Spec.PoolRef.Kind).To(Equal(inferencev1alpha2.Kind("InferencePool")))
		Expect(rw.Spec.Rules[0].Matches[0].Model.Type).To(HaveValue(Equal(inferencev1alpha2.MatchExact)))
		Expect(rw.Spec.Rules[0].Targets).To(HaveLen(2))
	})

	It("prints the pool and the age", func(ctx SpecContext) {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		Expect(env.Client.Get(ctx, client.ObjectKey{Name: "inferencemodelrewrites.inference.networking.x-k8s.io"}, crd)).To(Succeed())
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		Expect(versions).To(HaveLen(1))
		cols, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "additionalPrinterColumns")
		var names []string
		for _, c := range cols {
			m := c.(map[string]any)
			names = append(names, m["name"].(string)+"="+m["jsonPath"].(string))
		}
		Expect(strings.Join(names, " ")).To(Equal("Inference Pool=.spec.poolRef.name Age=.metadata.creationTimestamp"))
	})

	DescribeTable("accepts",
		func(ctx SpecContext, mutate func(*unstructured.Unstructured)) {
			u := validRewrite(ns)
			mutate(u)
			Expect(env.Client.Create(ctx, u)).To(Succeed())
		},
		Entry("a rule without matches", remove("spec", "rules", "0", "matches")),
		Entry("targets without weights", set([]any{
			map[string]any{"modelRewrite": "a"}, map[string]any{"modelRewrite": "b"},
		}, "spec", "rules")),
		Entry("no rules", set([]any{}, "spec", "rules")),
		Entry("weights 1 and 1000000", func(u *unstructured.Unstructured) {
			Expect(unstructured.SetNestedSlice(u.Object, []any{map[string]any{"targets": targets(1, 1000000)}}, "spec", "rules")).To(Succeed())
		}),
	)

	DescribeTable("rejects",
		func(ctx SpecContext, mutate func(*unstructured.Unstructured), fragment string) {
			u := validRewrite(ns)
			mutate(u)
			err := env.Client.Create(ctx, u)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got %v", err)
			Expect(err.Error()).To(ContainSubstring(fragment))
		},
		Entry("no pool", remove("spec", "poolRef"), "spec.poolRef: Required value"),
		Entry("no rules field", remove("spec", "rules"), "spec.rules: Required value"),
		Entry("a pool without a name", remove("spec", "poolRef", "name"), "spec.poolRef.name: Required value"),
		Entry("weight 0", rule(map[string]any{"targets": targets(0)}),
			"spec.rules[0].targets[0].weight: Invalid value: 0: spec.rules[0].targets[0].weight in body should be greater than or equal to 1"),
		Entry("weight over 1000000", rule(map[string]any{"targets": targets(1000001)}),
			"spec.rules[0].targets[0].weight: Invalid value: 1000001"),
		Entry("an empty target list", rule(map[string]any{"targets": []any{}}),
			"spec.rules[0].targets: Invalid value: 0: spec.rules[0].targets in body should have at least 1 items"),
		Entry("a target without a model", rule(map[string]any{"targets": []any{map[string]any{"weight": int64(1)}}}),
			"spec.rules[0].targets[0].modelRewrite: Required value"),
		Entry("a match without a model", rule(map[string]any{"matches": []any{map[string]any{}}, "targets": targets(1)}),
			"spec.rules[0].matches[0].model: Required value"),
		Entry("an empty model value", rule(map[string]any{
			"matches": []any{map[string]any{"model": map[string]any{"value": ""}}}, "targets": targets(1)}),
			"spec.rules[0].matches[0].model.value: Invalid value: \"\""),
		Entry("a match type other than Exact", rule(map[string]any{
			"matches": []any{map[string]any{"model": map[string]any{"type": "Prefix", "value": "x"}}}, "targets": targets(1)}),
			"spec.rules[0].matches[0].model.type: Unsupported value: \"Prefix\""),
		Entry("a bad pool kind", set("Not/AKind", "spec", "poolRef", "kind"),
			"spec.poolRef.kind: Invalid value: \"Not/AKind\""),
		// Upstream's API says either every target of a rule has a weight or
		// none has; a 10-weight canary beside an unweighted stable target
		// would otherwise take every request.
		Entry("weights on some targets only", rule(map[string]any{"targets": []any{
			map[string]any{"modelRewrite": "food-review-v1"},
			map[string]any{"modelRewrite": "food-review-v2", "weight": int64(10)},
		}}), "spec.rules[0].targets: Invalid value: either every target of a rule has a weight or none has"),
		// The bounds that let the API server afford the check above.
		Entry("more than 100 targets", rule(map[string]any{"targets": targets(slices.Repeat([]int64{1}, 101)...)}),
			"spec.rules[0].targets: Too many: 101: must have at most 100 items"),
	)
})

// rule replaces the rewrite's rules with the one given.
func rule(r map[string]any) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		Expect(unstructured.SetNestedSlice(u.Object, []any{r}, "spec", "rules")).To(Succeed())
	}
}

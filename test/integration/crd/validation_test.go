package crd

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
)

// validPool is the smallest pool a user would write with a picker Service.
func validPool(namespace string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": inferencev1.GroupVersion.String(),
		"kind":       "InferencePool",
		"metadata":   map[string]any{"generateName": "pool-", "namespace": namespace},
		"spec": map[string]any{
			"selector":    map[string]any{"matchLabels": map[string]any{"app": "vllm"}},
			"targetPorts": []any{map[string]any{"number": int64(8000)}},
			"endpointPickerRef": map[string]any{
				"name": "inferpick",
				"port": map[string]any{"number": int64(9002)},
			},
		},
	}}
	return u
}

func set(value any, path ...string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		Expect(unstructured.SetNestedField(u.Object, value, path...)).To(Succeed())
	}
}

func remove(path ...string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, path...) }
}

func ports(numbers ...int64) []any {
	out := make([]any, 0, len(numbers))
	for _, n := range numbers {
		out = append(out, map[string]any{"number": n})
	}
	return out
}

func labels(n int) map[string]any {
	out := make(map[string]any, n)
	for i := range n {
		out[fmt.Sprintf("label-%d", i)] = "x"
	}
	return out
}

var _ = Describe("InferencePool validation", func() {
	var ns string

	BeforeEach(func(ctx SpecContext) {
		ns = env.Namespace(ctx, "crd")
	})

	It("accepts a valid pool and applies the defaults", func(ctx SpecContext) {
		Expect(env.Client.Create(ctx, validPool(ns))).To(Succeed())

		var list inferencev1.InferencePoolList
		Expect(env.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(HaveLen(1))
		spec := list.Items[0].Spec
		Expect(spec.AppProtocol).To(Equal(inferencev1.AppProtocolHTTP))
		Expect(spec.EndpointPickerRef).NotTo(BeNil())
		Expect(spec.EndpointPickerRef.Kind).To(Equal(inferencev1.Kind("Service")))
		Expect(spec.EndpointPickerRef.Group).To(HaveValue(BeEmpty()))
		Expect(spec.EndpointPickerRef.FailureMode).To(Equal(inferencev1.EndpointPickerFailClose))
	})

	It("defaults a parent reference to a Gateway", func(ctx SpecContext) {
		u := validPool(ns)
		Expect(env.Client.Create(ctx, u)).To(Succeed())
		Expect(unstructured.SetNestedSlice(u.Object, []any{map[string]any{
			"parentRef":      map[string]any{"name": "gateway"},
			"controllerName": "example.com/gateway-controller",
		}}, "status", "parents")).To(Succeed())
		Expect(env.Client.Status().Update(ctx, u)).To(Succeed())

		pool := &inferencev1.InferencePool{}
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(u), pool)).To(Succeed())
		Expect(pool.Status.Parents).To(HaveLen(1))
		ref := pool.Status.Parents[0].ParentRef
		Expect(ref.Group).To(HaveValue(Equal(inferencev1.Group("gateway.networking.k8s.io"))))
		Expect(ref.Kind).To(Equal(inferencev1.Kind("Gateway")))
	})

	DescribeTable("accepts",
		func(ctx SpecContext, mutate func(*unstructured.Unstructured)) {
			u := validPool(ns)
			mutate(u)
			Expect(env.Client.Create(ctx, u)).To(Succeed())
		},
		Entry("no endpoint picker", remove("spec", "endpointPickerRef")),
		Entry("eight target ports", set(ports(1, 2, 3, 4, 5, 6, 7, 8), "spec", "targetPorts")),
		Entry("ports 1 and 65535", set(ports(1, 65535), "spec", "targetPorts")),
		Entry("64 labels", set(labels(64), "spec", "selector", "matchLabels")),
		Entry("an empty label value", set(map[string]any{"app": ""}, "spec", "selector", "matchLabels")),
		Entry("h2c", set("kubernetes.io/h2c", "spec", "appProtocol")),
		Entry("FailOpen", set("FailOpen", "spec", "endpointPickerRef", "failureMode")),
		Entry("a non-Service picker without a port", func(u *unstructured.Unstructured) {
			set("example.com", "spec", "endpointPickerRef", "group")(u)
			set("Picker", "spec", "endpointPickerRef", "kind")(u)
			remove("spec", "endpointPickerRef", "port")(u)
		}),
		// A schema cannot check map keys (upstream has the same limit); the
		// picker reports such a pool with an InvalidSelector event instead.
		Entry("a label key the API server cannot check", set(map[string]any{"bad key!": "x"}, "spec", "selector", "matchLabels")),
	)

	DescribeTable("rejects",
		func(ctx SpecContext, mutate func(*unstructured.Unstructured), fragment string) {
			u := validPool(ns)
			mutate(u)
			err := env.Client.Create(ctx, u)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got %v", err)
			Expect(err.Error()).To(ContainSubstring(fragment))
		},
		Entry("duplicate target ports", set(ports(8000, 8001, 8000), "spec", "targetPorts"),
			"port number must be unique"),
		Entry("a Service picker without a port", remove("spec", "endpointPickerRef", "port"),
			"port is required when kind is 'Service'"),
		Entry("an explicit Service picker without a port", func(u *unstructured.Unstructured) {
			set("Service", "spec", "endpointPickerRef", "kind")(u)
			remove("spec", "endpointPickerRef", "port")(u)
		}, "port is required when kind is 'Service'"),
		Entry("a picker without a name", remove("spec", "endpointPickerRef", "name"),
			"spec.endpointPickerRef.name: Required value"),
		Entry("nine target ports", set(ports(1, 2, 3, 4, 5, 6, 7, 8, 9), "spec", "targetPorts"),
			"spec.targetPorts: Too many: 9: must have at most 8 items"),
		Entry("an empty target port list", set([]any{}, "spec", "targetPorts"),
			"spec.targetPorts: Invalid value: 0: spec.targetPorts in body should have at least 1 items"),
		Entry("no target ports", remove("spec", "targetPorts"),
			"spec.targetPorts: Required value"),
		Entry("port 0", set(ports(0), "spec", "targetPorts"),
			"spec.targetPorts[0].number: Invalid value: 0: spec.targetPorts[0].number in body should be greater than or equal to 1"),
		Entry("port 65536", set(ports(65536), "spec", "targetPorts"),
			"spec.targetPorts[0].number: Invalid value: 65536: spec.targetPorts[0].number in body should be less than or equal to 65535"),
		Entry("65 labels", set(labels(65), "spec", "selector", "matchLabels"),
			"spec.selector.matchLabels: Too many: 65: must have at most 64 items"),
		Entry("no labels", set(map[string]any{}, "spec", "selector", "matchLabels"),
			"spec.selector.matchLabels: Invalid value: 0: spec.selector.matchLabels in body should have at least 1 properties"),
		Entry("a bad label value", set(map[string]any{"app": "-vllm"}, "spec", "selector", "matchLabels"),
			"spec.selector.matchLabels.app: Invalid value: \"-vllm\""),
		Entry("a label value over 63 characters", set(map[string]any{"app": fmt.Sprintf("%064d", 0)}, "spec", "selector", "matchLabels"),
			"spec.selector.matchLabels.app: Too long"),
		Entry("a bad appProtocol", set("h2", "spec", "appProtocol"),
			"spec.appProtocol: Unsupported value: \"h2\""),
		Entry("a bad failureMode", set("FailSometimes", "spec", "endpointPickerRef", "failureMode"),
			"spec.endpointPickerRef.failureMode: Unsupported value: \"FailSometimes\""),
		Entry("a bad picker kind", set("Not/AKind", "spec", "endpointPickerRef", "kind"),
			"spec.endpointPickerRef.kind: Invalid value: \"Not/AKind\""),
	)
})

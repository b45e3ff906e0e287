package controllers

import (
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	inferencev1alpha2 "github.com/inferpick/inferpick/api/v1alpha2"
	"github.com/inferpick/inferpick/picker/rewrite"
)

// A canary written with a weight on the new version only, which an older
// CRD lets through: the picker neither applies it (the unweighted stable
// target would get no request, the 10-weight canary all) nor marks it
// Accepted, and says why in the condition.
func TestRewriteWithWeightsOnSomeTargetsOnlyIsNotApplied(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	rw := &inferencev1alpha2.InferenceModelRewrite{
		ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: "ns", Generation: 1},
		Spec: inferencev1alpha2.InferenceModelRewriteSpec{
			PoolRef: &inferencev1alpha2.PoolObjectReference{Name: "pool"},
			Rules: []inferencev1alpha2.InferenceModelRewriteRule{{
				Matches: []inferencev1alpha2.Match{{Model: &inferencev1alpha2.ModelMatch{Value: "food-review"}}},
				Targets: []inferencev1alpha2.TargetModel{{ModelRewrite: "food-review-v1"}, {ModelRewrite: "food-review-v2", Weight: 10}},
			}},
		},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rw).WithStatusSubresource(rw).Build()
	tbl := rewrite.NewTable()
	r := &RewriteReconciler{client: c, sink: tbl, pool: types.NamespacedName{Namespace: "ns", Name: "pool"}, group: inferencev1.GroupName}
	key := types.NamespacedName{Namespace: "ns", Name: "canary"}
	if _, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for i := range 100 {
		if d, ok := tbl.Rewrite("food-review", "req-"+strconv.Itoa(i)); ok {
			got[d.Model]++
		} else {
			got["food-review"]++
		}
	}
	if got["food-review"] != 100 {
		t.Errorf("100 requests for food-review went to %v, want all left as they are", got)
	}
	if err := c.Get(t.Context(), key, rw); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(rw.Status.Conditions, string(inferencev1alpha2.RewriteConditionAccepted))
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != string(inferencev1alpha2.RewriteReasonInvalid) {
		t.Fatalf("Accepted condition = %+v, want False with reason %s", cond, inferencev1alpha2.RewriteReasonInvalid)
	}
	if want := "The rules do not apply to the requests of pool pool: rule 0: 1 of its 2 targets have a weight; either every target of a rule has one or none has"; cond.Message != want {
		t.Errorf("Accepted message = %q, want %q", cond.Message, want)
	}
}

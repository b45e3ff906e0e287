package controllers

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	inferencev1alpha2 "github.com/inferpick/inferpick/api/v1alpha2"
	"github.com/inferpick/inferpick/picker/flowcontrol"
)

// ObjectiveSink receives the priorities of the served pool's objectives.
// The picker's *flowcontrol.Priorities is one.
type ObjectiveSink interface {
	// Set records the priority of the named objective.
	Set(name string, prio int)
	// Delete drops the named objective's priority: the name keeps its
	// static priority (--objective-priorities), if it has one.
	Delete(name string)
}

var _ ObjectiveSink = (*flowcontrol.Priorities)(nil)

// ObjectiveReconciler keeps a sink equal to the InferenceObjectives of the
// pool's namespace that refer to the served pool.
type ObjectiveReconciler struct {
	reader client.Reader
	sink   ObjectiveSink
	pool   types.NamespacedName
	group  string
}

// +kubebuilder:rbac:groups=inference.networking.x-k8s.io,namespace=inferpick-system,resources=inferenceobjectives,verbs=get;list;watch

// Reconcile records the objective's priority (unset counts as 0), or drops
// it when the objective is gone or refers to another pool: a static
// priority of the same name then applies again.
func (r *ObjectiveReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	obj := &inferencev1alpha2.InferenceObjective{}
	if err := r.reader.Get(ctx, req.NamespacedName, obj); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("get objective %s: %w", req.NamespacedName, err)
		}
		r.sink.Delete(req.Name)
		log.V(logChanges).Info("Objective removed", "objective", req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if !obj.DeletionTimestamp.IsZero() || !servesPool(obj.Spec.PoolRef, r.group, r.pool) {
		r.sink.Delete(req.Name)
		return ctrl.Result{}, nil
	}
	prio := ptr.Deref(obj.Spec.Priority, 0)
	r.sink.Set(req.Name, prio)
	log.V(logSyncs).Info("Objective synced", "objective", klog.KObj(obj), "priority", prio)
	return ctrl.Result{}, nil
}

// servesPool reports whether ref names pool (of API group group); empty
// group and kind take the API's defaults.
func servesPool(ref inferencev1alpha2.PoolObjectReference, group string, pool types.NamespacedName) bool {
	refGroup, kind := string(ref.Group), string(ref.Kind)
	if refGroup == "" {
		refGroup = inferencev1.GroupName
	}
	if kind == "" {
		kind = "InferencePool"
	}
	return refGroup == group && kind == "InferencePool" && string(ref.Name) == pool.Name
}

// SetupObjectivesWithManager registers the objective reconciler with mgr.
// Like the pool controller it runs on every replica.
func SetupObjectivesWithManager(mgr ctrl.Manager, opts PoolReconcilerOptions, sink ObjectiveSink) error {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("objective reconciler options: %w", err)
	}
	if sink == nil {
		return errors.New("objective reconciler: nil sink")
	}
	group := opts.Group
	if group == "" {
		group = inferencev1.GroupName
	}
	r := &ObjectiveReconciler{reader: mgr.GetClient(), sink: sink, pool: opts.Pool, group: group}
	err := ctrl.NewControllerManagedBy(mgr).
		Named(Name+"-objectives").
		For(&inferencev1alpha2.InferenceObjective{}, builder.WithPredicates(inNamespace(opts.Pool.Namespace))).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(stopAfterDrain)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up objective reconciler: %w", err)
	}
	return nil
}

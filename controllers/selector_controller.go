package controllers

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// SelectorOptions say which pods the picker serves when there is no
// InferencePool object: the ready pods of one namespace that match a label
// selector, on the given ports.
type SelectorOptions struct {
	Namespace string
	Selector  labels.Selector
	Ports     []int32
}

// Validate reports what is missing in o.
func (o SelectorOptions) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("namespace is required"))
	}
	if o.Selector == nil || o.Selector.Empty() {
		errs = append(errs, errors.New("a non-empty selector is required"))
	}
	if len(o.Ports) == 0 {
		errs = append(errs, errors.New("at least one port is required"))
	}
	return errors.Join(errs...)
}

// SelectorCacheOptions limits the manager's cache to the pods the selector
// matches in its namespace.
func SelectorCacheOptions(o SelectorOptions) cache.Options {
	return cache.Options{
		DefaultNamespaces: map[string]cache.Config{o.Namespace: {}},
		ByObject:          map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: o.Selector}},
		DefaultTransform:  cache.TransformStripManagedFields(),
	}
}

// SelectorReconciler syncs the ready endpoints of the selected pods into a
// sink. It runs with one worker and one request key, like PoolReconciler.
type SelectorReconciler struct {
	reader client.Reader
	sink   EndpointSink
	opts   SelectorOptions
}

// Reconcile lists the selected pods from the cache and replaces the sink's
// endpoints with their ready ones.
func (r *SelectorReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	pods := &corev1.PodList{}
	if err := r.reader.List(ctx, pods, client.InNamespace(r.opts.Namespace),
		client.MatchingLabelsSelector{Selector: r.opts.Selector}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list pods matching %s: %w", r.opts.Selector, err)
	}
	eps := endpointsFor(r.opts.Ports, pods.Items)
	r.sink.Replace(eps)
	r.sink.MarkSynced()
	ctrl.LoggerFrom(ctx).V(logSyncs).Info("Synced selected endpoints", "selector", r.opts.Selector.String(), "endpoints", len(eps))
	return ctrl.Result{}, nil
}

// SetupSelectorWithManager registers a SelectorReconciler with mgr, on every
// replica, leader or not.
func SetupSelectorWithManager(mgr ctrl.Manager, opts SelectorOptions, sink EndpointSink) error {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("selector reconciler options: %w", err)
	}
	if sink == nil {
		return errors.New("selector reconciler: nil endpoint sink")
	}
	r := &SelectorReconciler{reader: mgr.GetClient(), sink: sink, opts: opts}
	key := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: opts.Namespace, Name: "selected-pods"}}
	toKey := func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{key} }
	// One reconcile at start marks the sink synced when no pod matches.
	initial := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(key)
		return nil
	})
	// The cache holds only the selected pods: a pod whose labels stop
	// matching arrives as a deletion.
	inNamespace := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == opts.Namespace
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named(Name+"-selector").
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(toKey), builder.WithPredicates(inNamespace)).
		WatchesRawSource(initial).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1,
			NeedLeaderElection:      ptr.To(false),
		}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up selector reconciler: %w", err)
	}
	return nil
}

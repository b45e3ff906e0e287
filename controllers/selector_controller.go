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
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// SelectorOptions say which pods the picker serves when there is no
// InferencePool object: the ready pods of one namespace that match a label
// selector, on the given ports.
type SelectorOptions struct {
	Namespace string
	Selector  labels.Selector
	Ports     []int32
	// ContextLengthLabel is the pod label read as the prompt lengths a pod
	// is meant for (policy.ContextLengthConfig); "" reads none.
	ContextLengthLabel string
	// FilterLabels are the pod labels the policy's label filters read
	// (policy.Config.LabelKeys), sorted: their values reach each
	// endpoint's Labels, in that order. Nil reads none.
	FilterLabels []string
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
// matches in its namespace, each trimmed to what the controller reads.
func SelectorCacheOptions(o SelectorOptions) cache.Options {
	return cache.Options{
		DefaultNamespaces: map[string]cache.Config{o.Namespace: {}},
		ByObject:          map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: o.Selector, Transform: trimPod}},
		DefaultTransform:  cache.TransformStripManagedFields(),
	}
}

// SelectorReconciler syncs the ready endpoints of the selected pods into a
// sink. Like PoolReconciler it runs with one worker and reconciles one pod
// per pod event; the whole set is listed once, at start.
type SelectorReconciler struct {
	reader client.Reader
	sink   EndpointSink
	opts   SelectorOptions
	pods   podSet
	// listed is true once the whole set was listed; pod requests before
	// that are covered by the list.
	listed bool
}

// Reconcile lists the selected pods and replaces the sink's endpoints with
// their ready ones (the request for the whole set), or upserts or removes
// the endpoints of one pod.
func (r *SelectorReconciler) Reconcile(ctx context.Context, req request) (ctrl.Result, error) {
	if req.pod {
		if !r.listed {
			return ctrl.Result{}, nil
		}
		eps, err := readPodEndpoints(ctx, r.reader, req.NamespacedName, r.opts.Selector, r.opts.Ports, &r.pods)
		if err != nil {
			return ctrl.Result{}, err
		}
		r.pods.sync(req.NamespacedName, eps)
		return ctrl.Result{}, nil
	}
	pods := &corev1.PodList{}
	if err := r.reader.List(ctx, pods, client.InNamespace(r.opts.Namespace),
		client.MatchingLabelsSelector{Selector: r.opts.Selector}, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("list pods matching %s: %w", r.opts.Selector, err)
	}
	r.pods.reset(ctx, r.opts.Ports, pods.Items)
	r.listed = true
	r.sink.MarkSynced()
	ctrl.LoggerFrom(ctx).V(logSyncs).Info("Synced selected endpoints", "selector", r.opts.Selector.String(), "endpoints", r.pods.count)
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
	r := &SelectorReconciler{reader: mgr.GetClient(), sink: sink, opts: opts, pods: newPodSet(sink)}
	r.pods.contextLabel = opts.ContextLengthLabel
	r.pods.labelKeys = opts.FilterLabels
	all := request{NamespacedName: types.NamespacedName{Namespace: opts.Namespace, Name: "selected-pods"}}
	// One list at start marks the sink synced, even when no pod matches.
	initial := source.TypedFunc[request](func(_ context.Context, q workqueue.TypedRateLimitingInterface[request]) error {
		q.Add(all)
		return nil
	})
	// The cache holds only the selected pods: a pod whose labels stop
	// matching arrives as a deletion.
	err := builder.TypedControllerManagedBy[request](mgr).
		Named(Name+"-selector").
		Watches(&corev1.Pod{}, handler.TypedEnqueueRequestsFromMapFunc(toPod), builder.WithPredicates(inNamespace(opts.Namespace))).
		WatchesRawSource(initial).
		WithOptions(controller.TypedOptions[request]{
			MaxConcurrentReconciles: 1,
			NeedLeaderElection:      ptr.To(stopAfterDrain),
		}).
		WithLogConstructor(requestLogger(mgr.GetLogger().WithValues("controller", Name+"-selector"), "selector")).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up selector reconciler: %w", err)
	}
	return nil
}

package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	inferencev1alpha2 "github.com/inferpick/inferpick/api/v1alpha2"
)

// Name is the controller's name, and the reporting component of its Events.
const Name = "inferpick"

// PoolReconcilerOptions says which InferencePool the picker serves.
type PoolReconcilerOptions struct {
	// Pool is the namespace and name of the served pool.
	Pool types.NamespacedName
	// Group is the pool's API group. Empty means inferencev1.GroupName, the
	// only group served.
	Group string
	// Self is the picker's own Pod, which gets the Events about a pool that
	// does not exist (an absent pool can carry none). Nil records none.
	Self *corev1.ObjectReference
	// Leader, when set, decides who records Events instead of the
	// manager's own leader election (leader.go).
	Leader Leader
	// ContextLengthLabel is the pod label read as the prompt lengths a pod
	// is meant for (policy.ContextLengthConfig); "" reads none.
	ContextLengthLabel string
	// FilterLabels are the pod labels the policy's label filters read
	// (policy.Config.LabelKeys), sorted: their values reach each
	// endpoint's Labels, in that order. Nil reads none.
	FilterLabels []string
}

// Validate reports what is missing or unsupported in o.
func (o PoolReconcilerOptions) Validate() error {
	var errs []error
	if o.Pool.Name == "" {
		errs = append(errs, errors.New("pool name is required"))
	}
	if o.Pool.Namespace == "" {
		errs = append(errs, errors.New("pool namespace is required"))
	}
	if o.Group != "" && o.Group != inferencev1.GroupName {
		errs = append(errs, fmt.Errorf("pool group %q is not supported; use %q", o.Group, inferencev1.GroupName))
	}
	return errors.Join(errs...)
}

// NewScheme returns a scheme that knows the built-in Kubernetes types and the
// InferencePool and InferenceObjective: what the manager, its cache and its event recorder need.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("add built-in types to scheme: %w", err)
	}
	if err := inferencev1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("add %s to scheme: %w", inferencev1.GroupVersion, err)
	}
	if err := inferencev1alpha2.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("add %s to scheme: %w", inferencev1alpha2.GroupVersion, err)
	}
	return s, nil
}

// CacheOptions limits the manager's cache to what the reconciler reads: the
// pool's namespace, and of the InferencePools there only the served one.
// Managed fields are dropped from cached objects, and pods keep only what
// the controllers read.
func CacheOptions(pool types.NamespacedName) cache.Options {
	return cache.Options{
		DefaultNamespaces: map[string]cache.Config{pool.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&inferencev1.InferencePool{}: {
				Field: fields.OneTermEqualSelector("metadata.name", pool.Name),
			},
			&corev1.Pod{}: {Transform: trimPod},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	}
}

// SetupWithManager registers the pool reconciler with mgr. It fills sink from
// the manager's cache, and records Events on the pool with a recorder of
// its own (events.go). The controller runs on every replica, leader or not:
// each replica routes requests and needs its own registry. Only the elected
// replica records Events (leader.go).
func SetupWithManager(mgr ctrl.Manager, opts PoolReconcilerOptions, sink EndpointSink) error {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("pool reconciler options: %w", err)
	}
	if sink == nil {
		return errors.New("pool reconciler: nil endpoint sink")
	}
	// Core Events, not events.k8s.io: the newer recorder folds Events that
	// differ only in their message into one series that keeps the first
	// message, which would leave stale endpoint counts on the pool; the
	// core one's series (events.go) keep the latest.
	recorder, err := newEventRecorder(mgr)
	if err != nil {
		return fmt.Errorf("pool reconciler: %w", err)
	}
	r := &PoolReconciler{
		reader:   mgr.GetClient(),
		sink:     sink,
		recorder: recorder,
		clock:    clock.RealClock{},
		pool:     opts.Pool,
		self:     opts.Self,
		reported: -1,
		pods:     newPodSet(sink),
	}
	r.pods.contextLabel = opts.ContextLengthLabel
	r.pods.labelKeys = opts.FilterLabels
	poolReq := request{NamespacedName: opts.Pool}
	toPool := func(context.Context, client.Object) []request { return []request{poolReq} }
	isPool := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == opts.Pool.Namespace && o.GetName() == opts.Pool.Name
	})
	// One reconcile at start, so that a pool that does not exist yet is
	// confirmed absent and announced: no object event would ever trigger it.
	initial := source.TypedFunc[request](func(_ context.Context, q workqueue.TypedRateLimitingInterface[request]) error {
		q.Add(poolReq)
		return nil
	})
	// After pod changes the pool is reconciled once, a little later, to
	// report the new endpoint count: a burst of changes makes one Event.
	announce := make(chan event.TypedGenericEvent[struct{}], 1)
	r.announce = func() {
		select {
		case announce <- event.TypedGenericEvent[struct{}]{}:
		default: // one is pending already
		}
	}
	announced := source.TypedChannel(announce, handler.TypedFuncs[struct{}, request]{
		GenericFunc: func(_ context.Context, _ event.TypedGenericEvent[struct{}], q workqueue.TypedRateLimitingInterface[request]) {
			q.AddAfter(poolReq, announceDelay)
		},
	})
	b := builder.TypedControllerManagedBy[request](mgr).
		Named(Name).
		Watches(&inferencev1.InferencePool{}, handler.TypedEnqueueRequestsFromMapFunc(toPool), builder.WithPredicates(isPool)).
		Watches(&corev1.Pod{}, handler.TypedEnqueueRequestsFromMapFunc(toPod), builder.WithPredicates(inNamespace(opts.Pool.Namespace))).
		WatchesRawSource(initial).
		WatchesRawSource(announced)
	if opts.Leader != nil {
		// Without an election this replica records every Event; with one,
		// only while it leads, and a new term announces the state anew.
		r.leading, r.terms = opts.Leader.Leading, new(atomic.Uint64)
		b = b.WatchesRawSource(onGain(opts.Leader.Gained(), r.terms, only(poolReq)))
	}
	err = b.WithOptions(controller.TypedOptions[request]{
		MaxConcurrentReconciles: 1,
		NeedLeaderElection:      ptr.To(stopAfterDrain),
	}).
		WithLogConstructor(requestLogger(mgr.GetLogger().WithValues("controller", Name), "InferencePool")).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up pool reconciler: %w", err)
	}
	return nil
}

// announceDelay is how long after a pod change the pool's endpoint count is
// reported: changes within it make one Event.
const announceDelay = time.Second

// toPod maps a pod event to that pod's own request.
func toPod(_ context.Context, o client.Object) []request { return []request{podRequest(o)} }

func inNamespace(ns string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == ns })
}

// requestLogger names the whole (of kind whole) in the logger of its
// reconciles. A pod's reconcile gets the base logger: naming the pod would
// encode it on every pod event, a good part of the event's cost, and the
// pod reconcile logs nothing itself (its errors name the pod).
func requestLogger(base logr.Logger, whole string) func(*request) logr.Logger {
	return func(req *request) logr.Logger {
		if req == nil || req.pod {
			return base
		}
		return base.WithValues(whole, klog.KRef(req.Namespace, req.Name))
	}
}

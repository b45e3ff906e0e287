// Package controllers keeps the picker's worker registry equal to the ready
// Pods of the one InferencePool the picker serves.
//
// A single reconciler watches that pool and the Pods of its namespace. A pod
// event reconciles that pod alone: its endpoints are recomputed from the
// cache (read without a copy) and only they are upserted into or removed
// from the registry, so the work of an event does not grow with the pool.
// The whole endpoint set is listed only when the pool itself appears or its
// selector or ports change. The registry keeps the workers of the pods and
// ports that stay (with their load; a port moved in the list takes the rank
// of its new place) and detaches the rest. The picker only reads the pool: it never
// writes its status.
package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	"github.com/inferpick/inferpick/picker/registry"
)

// EndpointSink receives the endpoint set of the served pool. The picker's
// *registry.Registry is one.
type EndpointSink interface {
	// Replace makes the sink hold exactly eps.
	Replace(eps []registry.Endpoint)
	// Update removes the endpoints keyed remove, then adds or updates
	// upsert, leaving every other endpoint untouched.
	Update(upsert []registry.Endpoint, remove []registry.Key)
	// MarkSynced records that the sink reflects the API server's view.
	MarkSynced()
	// MarkUnsynced records that the served pool does not exist: the picker
	// is not ready.
	MarkUnsynced()
}

var (
	_ EndpointSink                       = (*registry.Registry)(nil)
	_ reconcile.TypedReconciler[request] = (*PoolReconciler)(nil)
	_ reconcile.TypedReconciler[request] = (*SelectorReconciler)(nil)
	_ reconcile.Reconciler               = (*ObjectiveReconciler)(nil)
)

// Reasons of the Events recorded on the served pool.
const (
	// ReasonEndpointsChanged: the number of ready endpoints changed and is
	// not zero.
	ReasonEndpointsChanged = "EndpointsChanged"
	// ReasonNoReadyEndpoints: no endpoint of the pool is ready; every request
	// through the pool will fail until one is.
	ReasonNoReadyEndpoints = "NoReadyEndpoints"
	// ReasonInvalidSelector: the pool's selector cannot be used.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonPoolNotFound, on the picker's own Pod: the pool it serves does
	// not exist.
	ReasonPoolNotFound = "PoolNotFound"
)

// Log verbosity of the reconciler's messages.
const (
	logChanges = 2 // the pool appeared, went away or became unusable
	logSyncs   = 4 // every completed sync
)

// PoolReconciler syncs the served pool's ready endpoints into a sink.
//
// The controller runs with a single worker, so reconciles never overlap and
// the fields below need no lock.
type PoolReconciler struct {
	reader   client.Reader
	sink     EndpointSink
	recorder record.EventRecorder
	pool     types.NamespacedName
	self     *corev1.ObjectReference // the picker's Pod, for Events about a missing pool

	// missing is true once the pool's absence was logged.
	missing bool

	// announcedFor is the UID of the pool object the fields below describe:
	// a pool deleted and re-created between two reconciles is a new object
	// whose Events start afresh.
	announcedFor types.UID
	// reported is the endpoint count last announced in an Event, or -1 when
	// nothing was announced for the current pool object.
	reported int
	// invalid is the selector error last announced, or "".
	invalid string
	// clock times the Events; lastEvent is when the last one was recorded
	// on the pool.
	clock     clock.PassiveClock
	lastEvent time.Time
	// announcedMissing is true once the pool's absence was announced in an
	// Event.
	announcedMissing bool
	// leading reports whether this replica records Events (leader.go); nil
	// means always.
	leading func() bool
	// terms counts the lease terms this replica has won (onGain); nil when
	// it wins one at most. term is the count the fields above were
	// announced in: a new term forgets them, so that it announces the state
	// as it then is, whatever an earlier term of this replica said.
	terms *atomic.Uint64
	term  uint64

	// served is what the endpoints were computed from; nil while no usable
	// pool is served, when pod requests are left to the pool's next list.
	served *poolView
	pods   podSet
	// announce asks for a reconcile of the pool, soon, so that the endpoint
	// count is reported after pod changes without an Event for each. Nil
	// reports nothing until the pool's next reconcile.
	announce func()
}

// poolView is the part of the pool its endpoints depend on.
type poolView struct {
	uid      types.UID
	selector labels.Selector
	ports    []int32
}

func (v *poolView) same(o *poolView) bool {
	return v != nil && o != nil && v.uid == o.uid && v.selector.String() == o.selector.String() && slices.Equal(v.ports, o.ports)
}

// +kubebuilder:rbac:groups="",namespace=inferpick-system,resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=inference.networking.k8s.io,namespace=inferpick-system,resources=inferencepools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=inferpick-system,resources=events,verbs=create;patch

// Reconcile handles one pod of the pool's namespace, or the pool itself.
func (r *PoolReconciler) Reconcile(ctx context.Context, req request) (ctrl.Result, error) {
	if req.pod {
		return r.reconcilePod(ctx, req.NamespacedName)
	}
	return r.reconcilePool(ctx)
}

// reconcilePod upserts or removes the endpoints of one pod, and only them.
func (r *PoolReconciler) reconcilePod(ctx context.Context, key types.NamespacedName) (ctrl.Result, error) {
	if r.served == nil || key.Namespace != r.pool.Namespace {
		return ctrl.Result{}, nil
	}
	eps, err := readPodEndpoints(ctx, r.reader, key, r.served.selector, r.served.ports, &r.pods)
	if err != nil {
		return ctrl.Result{}, err
	}
	if r.pods.sync(key, eps) && r.announce != nil {
		r.announce()
	}
	return ctrl.Result{}, nil
}

// reconcilePool follows the pool: when it appears or its selector or ports
// change, every pod is listed from the cache and the sink replaced; in any
// case the endpoint count is reported. A missing pool empties the sink.
func (r *PoolReconciler) reconcilePool(ctx context.Context) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)

	pool := &inferencev1.InferencePool{}
	if err := r.reader.Get(ctx, r.pool, pool); err != nil {
		if err := client.IgnoreNotFound(err); err != nil {
			return ctrl.Result{}, fmt.Errorf("get pool %s: %w", r.pool, err)
		}
		r.clear()
		r.sink.MarkUnsynced()
		if !r.missing {
			r.missing = true
			log.Info("InferencePool not found: not ready and serving no endpoints until it exists. Create it (the chart does with pool.create=true) or point --pool-name and --pool-namespace at an existing pool",
				"pool", r.pool)
		}
		if r.self != nil && r.lead() && !r.announcedMissing {
			r.announcedMissing = true
			r.recorder.Eventf(r.self, corev1.EventTypeWarning, ReasonPoolNotFound,
				"InferencePool %s not found: create it, or set --pool-name and --pool-namespace to an existing pool", r.pool)
		}
		return ctrl.Result{}, nil
	}
	r.announcedMissing = false
	if r.missing {
		r.missing = false
		log.Info("InferencePool found", "pool", klog.KObj(pool))
	}
	if pool.UID != r.announcedFor {
		r.announcedFor = pool.UID
		r.reported = -1
		r.invalid = ""
	}
	if !pool.DeletionTimestamp.IsZero() {
		log.V(logChanges).Info("Pool is being deleted; serving no endpoints", "pool", klog.KObj(pool))
		r.clear()
		r.sink.MarkSynced()
		return ctrl.Result{}, nil
	}

	sel, err := selectorOf(pool)
	if err != nil {
		r.served = nil
		r.pods.clear()
		r.sink.MarkSynced()
		r.reported = -1
		if r.lead() && r.invalid != err.Error() {
			r.invalid = err.Error()
			r.lastEvent = r.clock.Now()
			r.recorder.Eventf(pool, corev1.EventTypeWarning, ReasonInvalidSelector,
				"Selecting no pods: %v", err)
		}
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	r.invalid = ""

	view := &poolView{uid: pool.UID, selector: sel, ports: portsOf(pool)}
	if !view.same(r.served) {
		pods := &corev1.PodList{}
		if err := r.reader.List(ctx, pods, client.InNamespace(pool.Namespace),
			client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
			return ctrl.Result{}, fmt.Errorf("list pods of pool %s: %w", r.pool, err)
		}
		r.pods.reset(ctx, view.ports, pods.Items)
		r.served = view
		log.V(logSyncs).Info("Synced pool endpoints", "pool", klog.KObj(pool), "endpoints", r.pods.count)
	}
	r.sink.MarkSynced()
	return ctrl.Result{RequeueAfter: r.report(pool, r.pods.count)}, nil
}

// clear empties the sink for an absent pool and forgets what was announced,
// so a re-created pool gets fresh Events. The caller says whether that is
// synced (a pool being deleted) or not (a missing one): marking it synced
// here would report a missing pool ready until the caller's next call.
func (r *PoolReconciler) clear() {
	r.served = nil
	r.pods.clear()
	r.reported = -1
	r.invalid = ""
}

// lead reports whether this replica records Events: a follower announces
// nothing, and a leader in a new term forgets what it announced in the
// last, so that on election it announces the state as it then is.
func (r *PoolReconciler) lead() bool {
	if r.leading != nil && !r.leading() {
		return false
	}
	if r.terms != nil {
		if t := r.terms.Load(); t != r.term {
			r.term = t
			r.reported = -1
			r.invalid = ""
			r.announcedMissing = false
		}
	}
	return true
}

// report records an Event when the ready endpoint count differs from the one
// last announced. When the last Event on the pool is more recent than
// eventInterval it records none and returns how long to wait: the pool is
// reconciled again then, and the count it then has is announced.
func (r *PoolReconciler) report(pool *inferencev1.InferencePool, n int) time.Duration {
	if !r.lead() || n == r.reported {
		return 0
	}
	now := r.clock.Now()
	if wait := r.lastEvent.Add(eventInterval).Sub(now); wait > 0 {
		return wait
	}
	was := r.reported
	r.reported = n
	r.lastEvent = now
	switch {
	case n == 0:
		r.recorder.Event(pool, corev1.EventTypeWarning, ReasonNoReadyEndpoints,
			"No ready pod matches the selector; requests to the pool cannot be served")
	case was < 0:
		r.recorder.Eventf(pool, corev1.EventTypeNormal, ReasonEndpointsChanged,
			"%d ready endpoints", n)
	default:
		r.recorder.Eventf(pool, corev1.EventTypeNormal, ReasonEndpointsChanged,
			"%d ready endpoints (was %d)", n, was)
	}
	return 0
}

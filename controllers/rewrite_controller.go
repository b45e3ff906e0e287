package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	inferencev1alpha2 "github.com/inferpick/inferpick/api/v1alpha2"
	"github.com/inferpick/inferpick/picker/rewrite"
)

// RewriteSink receives the model rewrites of the served pool. The picker's
// *rewrite.Table is one.
type RewriteSink interface {
	// Set records the rules of the named rewrite, replacing what it had.
	Set(name string, obj rewrite.Object)
	// Delete forgets the named rewrite.
	Delete(name string)
}

var (
	_ RewriteSink          = (*rewrite.Table)(nil)
	_ reconcile.Reconciler = (*RewriteReconciler)(nil)
)

// conflictRetry is how soon a rewrite whose status another replica changed
// under this one is looked at again.
const conflictRetry = 100 * time.Millisecond

// RewriteReconciler keeps a sink equal to the InferenceModelRewrites of the
// pool's namespace that refer to the served pool, and marks them Accepted;
// one whose rules break the API (weights on some targets of a rule only,
// which an older CRD lets through) is left out and marked not Accepted. A
// rewrite pointed at another pool loses the condition this picker set.
// Every replica keeps its sink; only the leader, under an election, writes
// the status.
type RewriteReconciler struct {
	client client.Client
	sink   RewriteSink
	pool   types.NamespacedName
	group  string
	// leading reports whether this replica writes status (leader.go); nil
	// without an election, when it always does.
	leading func() bool
}

// +kubebuilder:rbac:groups=inference.networking.x-k8s.io,namespace=inferpick-system,resources=inferencemodelrewrites,verbs=get;list;watch
// +kubebuilder:rbac:groups=inference.networking.x-k8s.io,namespace=inferpick-system,resources=inferencemodelrewrites/status,verbs=patch

// Reconcile records the rewrite's rules, or forgets the rewrite when it is
// gone, refers to another pool or has invalid rules.
func (r *RewriteReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	obj := &inferencev1alpha2.InferenceModelRewrite{}
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("get model rewrite %s: %w", req.NamespacedName, err)
		}
		r.sink.Delete(req.Name)
		log.V(logChanges).Info("Model rewrite removed", "modelRewrite", req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if !obj.DeletionTimestamp.IsZero() {
		r.sink.Delete(req.Name)
		return ctrl.Result{}, nil
	}
	served := obj.Spec.PoolRef != nil && servesPool(*obj.Spec.PoolRef, r.group, r.pool)
	invalid := invalidRules(obj)
	if served && invalid == "" {
		rw := rulesOf(obj)
		r.sink.Set(req.Name, rw)
		log.V(logSyncs).Info("Model rewrite synced", "modelRewrite", klog.KObj(obj), "rules", len(rw.Rules))
	} else {
		r.sink.Delete(req.Name)
		if served {
			log.V(logChanges).Info("Model rewrite not applied", "modelRewrite", klog.KObj(obj), "reason", invalid)
		}
	}
	switch {
	case r.leading != nil && !r.leading():
		// The leader writes the status; this replica writes it once it
		// leads (a new term reconciles every rewrite).
		return ctrl.Result{}, nil
	case served && invalid == "":
		return statusWritten(r.accept(ctx, obj, metav1.ConditionTrue, inferencev1alpha2.RewriteReasonAccepted, r.acceptedMessage()))
	case served:
		return statusWritten(r.accept(ctx, obj, metav1.ConditionFalse, inferencev1alpha2.RewriteReasonInvalid, r.invalidMessage(invalid)))
	default:
		return r.withdraw(ctx, obj)
	}
}

// invalidRules says how the rewrite's rules break the API where the CRD
// in the cluster may not check it (an older one than the picker's), or ""
// when they do not: a rule's targets have weights on some only, which
// upstream's API forbids and gives no meaning.
func invalidRules(obj *inferencev1alpha2.InferenceModelRewrite) string {
	for i, rule := range obj.Spec.Rules {
		weighted := 0
		for _, t := range rule.Targets {
			if t.Weight > 0 {
				weighted++
			}
		}
		if weighted > 0 && weighted < len(rule.Targets) {
			return fmt.Sprintf("rule %d: %d of its %d targets have a weight; either every target of a rule has one or none has", i, weighted, len(rule.Targets))
		}
	}
	return ""
}

// statusWritten is the result of a reconcile that wrote the status with
// err.
func statusWritten(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		// Another replica, or another pool's picker, wrote the status
		// first: look again.
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, err
}

// acceptedMessage is the message of the Accepted condition this picker
// writes: it names the pool, which tells the condition this picker wrote
// from one another pool's picker wrote.
func (r *RewriteReconciler) acceptedMessage() string {
	return "The rules apply to the requests of pool " + r.pool.Name
}

// invalidPrefix begins the message of the Accepted condition this picker
// writes for a rewrite whose rules it does not apply; it names the pool
// too.
func (r *RewriteReconciler) invalidPrefix() string {
	return "The rules do not apply to the requests of pool " + r.pool.Name + ": "
}

func (r *RewriteReconciler) invalidMessage(why string) string { return r.invalidPrefix() + why }

// wrote reports whether this picker wrote c.
func (r *RewriteReconciler) wrote(c *metav1.Condition) bool {
	return c.Message == r.acceptedMessage() || strings.HasPrefix(c.Message, r.invalidPrefix())
}

// accept sets the Accepted condition, writing status only when it changed.
func (r *RewriteReconciler) accept(ctx context.Context, obj *inferencev1alpha2.InferenceModelRewrite,
	status metav1.ConditionStatus, reason inferencev1alpha2.InferenceModelRewriteConditionReason, message string) error {
	cond := metav1.Condition{
		Type:               string(inferencev1alpha2.RewriteConditionAccepted),
		Status:             status,
		Reason:             string(reason),
		Message:            message,
		ObservedGeneration: obj.Generation,
	}
	old := meta.FindStatusCondition(obj.Status.Conditions, cond.Type)
	if old != nil && old.Status == cond.Status && old.Reason == cond.Reason &&
		old.Message == cond.Message && old.ObservedGeneration == cond.ObservedGeneration {
		return nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	meta.SetStatusCondition(&obj.Status.Conditions, cond)
	if err := r.client.Status().Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("update status of model rewrite %s: %w", klog.KObj(obj), err)
	}
	return nil
}

// withdraw removes the Accepted condition this picker wrote for an earlier
// generation of a rewrite that no longer refers to the served pool. A
// condition for the current generation, or one naming another pool, was
// written by that pool's picker and is left alone; the optimistic lock keeps
// this picker from removing one written after it read the rewrite.
func (r *RewriteReconciler) withdraw(ctx context.Context, obj *inferencev1alpha2.InferenceModelRewrite) (ctrl.Result, error) {
	old := meta.FindStatusCondition(obj.Status.Conditions, string(inferencev1alpha2.RewriteConditionAccepted))
	if old == nil || !r.wrote(old) || old.ObservedGeneration >= obj.Generation {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	meta.RemoveStatusCondition(&obj.Status.Conditions, old.Type)
	if err := r.client.Status().Patch(ctx, obj, patch); err != nil {
		return statusWritten(fmt.Errorf("withdraw Accepted of model rewrite %s: %w", klog.KObj(obj), err))
	}
	ctrl.LoggerFrom(ctx).V(logChanges).Info("Model rewrite no longer refers to the pool: Accepted withdrawn", "modelRewrite", klog.KObj(obj))
	return ctrl.Result{}, nil
}

// all is a request for each model rewrite of the pool's namespace in the
// cache.
func (r *RewriteReconciler) all(ctx context.Context) []reconcile.Request {
	var list inferencev1alpha2.InferenceModelRewriteList
	if err := r.client.List(ctx, &list, client.InNamespace(r.pool.Namespace)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List model rewrites to write their status as the new leader")
		return nil
	}
	reqs := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return reqs
}

// rulesOf converts the rewrite's rules for the table.
func rulesOf(obj *inferencev1alpha2.InferenceModelRewrite) rewrite.Object {
	out := rewrite.Object{Created: obj.CreationTimestamp.Time, Rules: make([]rewrite.Rule, 0, len(obj.Spec.Rules))}
	for _, rule := range obj.Spec.Rules {
		var rr rewrite.Rule
		for _, m := range rule.Matches {
			if m.Model == nil || ptr.Deref(m.Model.Type, inferencev1alpha2.MatchExact) != inferencev1alpha2.MatchExact {
				continue
			}
			rr.Models = append(rr.Models, m.Model.Value)
		}
		if len(rule.Matches) > 0 && len(rr.Models) == 0 {
			continue // matches nothing this picker can compare
		}
		for _, t := range rule.Targets {
			rr.Targets = append(rr.Targets, rewrite.Target{Model: t.ModelRewrite, Weight: t.Weight})
		}
		out.Rules = append(out.Rules, rr)
	}
	return out
}

// SetupRewritesWithManager registers the model-rewrite reconciler with mgr.
// Like the pool controller it runs on every replica: each keeps its own
// table. With opts.Leader only the leader writes status, and a new term
// reconciles every rewrite of the namespace.
func SetupRewritesWithManager(mgr ctrl.Manager, opts PoolReconcilerOptions, sink RewriteSink) error {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("model rewrite reconciler options: %w", err)
	}
	if sink == nil {
		return errors.New("model rewrite reconciler: nil sink")
	}
	group := opts.Group
	if group == "" {
		group = inferencev1.GroupName
	}
	r := &RewriteReconciler{client: mgr.GetClient(), sink: sink, pool: opts.Pool, group: group}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(Name+"-model-rewrites").
		For(&inferencev1alpha2.InferenceModelRewrite{}, builder.WithPredicates(inNamespace(opts.Pool.Namespace), predicate.GenerationChangedPredicate{}))
	if opts.Leader != nil {
		r.leading = opts.Leader.Leading
		b = b.WatchesRawSource(onGain(opts.Leader.Gained(), nil, r.all))
	}
	err := b.WithOptions(controller.Options{NeedLeaderElection: ptr.To(stopAfterDrain)}).Complete(r)
	if err != nil {
		return fmt.Errorf("set up model rewrite reconciler: %w", err)
	}
	return nil
}

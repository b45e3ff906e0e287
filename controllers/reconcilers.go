package controllers

import "sigs.k8s.io/controller-runtime/pkg/reconcile"

// The reconcilers: the endpoint controllers key their work by pod or pool
// (request), the others by the object reconciled.
var (
	_ reconcile.TypedReconciler[request] = (*PoolReconciler)(nil)
	_ reconcile.TypedReconciler[request] = (*SelectorReconciler)(nil)
	_ reconcile.Reconciler               = (*ObjectiveReconciler)(nil)
	_ reconcile.Reconciler               = (*RewriteReconciler)(nil)
)

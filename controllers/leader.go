package controllers

import (
	"context"
	"sync/atomic"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Routing needs no leader: every replica keeps its own registry and serves.
// Writing to the API server does: with several replicas, only the elected
// one records Events, so a pool gets one Event per change, not one per
// replica, and only it writes the status of the pool's model rewrites. The election is the picker's own (Leader), not the manager's,
// which ends the process when the lease is lost.

// Leader is the replicas' election: a replica that loses the lease keeps
// serving, which the manager's election does not allow.
type Leader interface {
	// Leading reports whether this replica holds the lease.
	Leading() bool
	// Gained returns a channel of the caller's own that receives a value
	// each time this replica takes the lease from then on.
	Gained() <-chan struct{}
}

// onGain counts in terms (when not nil) each time gained receives, then
// enqueues what reqs returns, so that a new leader writes the current state
// even when it wrote the same in an earlier term.
func onGain[T comparable](gained <-chan struct{}, terms *atomic.Uint64, reqs func(context.Context) []T) source.TypedSource[T] {
	return source.TypedFunc[T](func(ctx context.Context, q workqueue.TypedRateLimitingInterface[T]) error {
		go func() {
			for {
				select {
				case <-gained:
					if terms != nil {
						terms.Add(1)
					}
					for _, req := range reqs(ctx) {
						q.Add(req)
					}
				case <-ctx.Done():
					return
				}
			}
		}()
		return nil
	})
}

// only is the request list of onGain that always holds req alone.
func only[T any](req T) func(context.Context) []T {
	return func(context.Context) []T { return []T{req} }
}

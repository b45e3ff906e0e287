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

// stopAfterDrain is the NeedLeaderElection of the controllers that fill
// what routing reads (the endpoints, the objectives' priorities, the
// rewrites) and of the Event recorder. The manager's own election is off in
// every mode (app.ManagerOptions), so its leader-election group runs on every
// replica as soon as the caches have synced, as the other runnables do; but
// the manager stops that group only once every other runnable has returned,
// the ext_proc server's drain among them. A replica draining after SIGTERM
// thus goes on following the pool: a request it routes then (one that
// waited in the flow-control queue, or a stream the gateway opened before
// it read the GOAWAY) never goes to a pod deleted or turned unready since.
const stopAfterDrain = true

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

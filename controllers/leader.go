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
// replica. The manager closes its Elected channel when this replica wins the
// lease (at once when leader election is off), the moment it starts the
// runnables that need leader election.

// electedFunc reports whether elected is closed.
func electedFunc(elected <-chan struct{}) func() bool {
	return func() bool {
		select {
		case <-elected:
			return true
		default:
			return false
		}
	}
}

// onElection enqueues req once elected is closed, so that a replica which
// becomes the leader announces the current state it did not announce while
// it followed.
func onElection[T comparable](elected <-chan struct{}, req T) source.TypedSource[T] {
	return source.TypedFunc[T](func(ctx context.Context, q workqueue.TypedRateLimitingInterface[T]) error {
		go func() {
			select {
			case <-elected:
				q.Add(req)
			case <-ctx.Done():
			}
		}()
		return nil
	})
}

// Leader is an election other than the manager's: active-active replicas
// keep serving when they lose the lease, which the manager's election does
// not allow.
type Leader interface {
	// Leading reports whether this replica holds the lease.
	Leading() bool
	// Gained receives a value each time this replica takes the lease.
	Gained() <-chan struct{}
}

// onGain counts in terms each time gained receives, then enqueues req, so
// that a new leader announces the current state even when it announced the
// same in an earlier term.
func onGain[T comparable](gained <-chan struct{}, terms *atomic.Uint64, req T) source.TypedSource[T] {
	return source.TypedFunc[T](func(ctx context.Context, q workqueue.TypedRateLimitingInterface[T]) error {
		go func() {
			for {
				select {
				case <-gained:
					terms.Add(1)
					q.Add(req)
				case <-ctx.Done():
					return
				}
			}
		}()
		return nil
	})
}

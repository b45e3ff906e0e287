package app

import (
	"context"
	"errors"

	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// routing runs the ext_proc server together with what its picks depend on
// (the metrics scraper, the KV-events subscriber, the flow-control queue and
// its ticker) and the health port, which answers probes through the drain. At ctx end the server drains first and the others stop only
// once it has returned: a request that waits in the queue or is picked
// during the drain is still dispatched, on metrics still fresh, instead of
// being turned away the moment the drain begins.
type routing struct {
	server manager.Runnable
	deps   []manager.Runnable
}

var _ manager.LeaderElectionRunnable = (*routing)(nil)

// NeedLeaderElection is false: every replica routes.
func (r *routing) NeedLeaderElection() bool { return false }

// Start runs the dependencies until the server has returned; a dependency
// that fails stops the server too.
func (r *routing) Start(ctx context.Context) error {
	depsCtx, stopDeps := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDeps()
	g, gctx := errgroup.WithContext(depsCtx)
	for _, d := range r.deps {
		g.Go(func() error { return d.Start(gctx) })
	}
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	stopOnFailure := context.AfterFunc(gctx, stopServing)
	defer stopOnFailure()

	err := r.server.Start(serveCtx)
	stopDeps()
	return errors.Join(err, g.Wait())
}

package app

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// leaseElector is the replicas' leader election, in both HA modes. The
// manager's own election ends the process when the lease is lost, which
// would cut every stream of a replica that serves, and releases the lease
// only once every runnable has stopped, after the drain. Here losing the
// lease only stops this replica's leader work (Events, and in active-passive
// mode readiness) and it campaigns again; and the lease is released when
// the run's context ends, as the drain begins, so a standby takes over at
// once.
type leaseElector struct {
	lock                resourcelock.Interface
	lease, renew, retry time.Duration
	leading             atomic.Bool
	mu                  sync.Mutex // orders the callbacks' writes of leading; guards gained
	gained              []chan struct{}
	name                string
}

var _ manager.LeaderElectionRunnable = (*leaseElector)(nil)

func newLeaseElector(cfg *rest.Config, o *Options) (*leaseElector, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	host, _ := os.Hostname()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.PoolNamespace, o.leaderElectionID(),
		cs.CoreV1(), cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: host + "_" + uuid.NewString()})
	if err != nil {
		return nil, fmt.Errorf("leader election lock: %w", err)
	}
	return &leaseElector{
		lock: lock, name: o.leaderElectionID(),
		lease: o.LeaderElectionLeaseDuration, renew: o.LeaderElectionRenewDeadline, retry: o.LeaderElectionRetryPeriod,
	}, nil
}

// callbacks are the election's. client-go starts OnStartedLeading on a
// goroutine of its own and, when the lease is lost, cancels its context
// before it calls OnStoppedLeading. A term lost before that goroutine ran
// would otherwise leave leading set for good: it is set only while the
// term's context lives, under the lock OnStoppedLeading takes.
func (l *leaseElector) callbacks() leaderelection.LeaderCallbacks {
	return leaderelection.LeaderCallbacks{
		OnStartedLeading: func(term context.Context) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if term.Err() != nil {
				return
			}
			l.leading.Store(true)
			for _, c := range l.gained {
				select {
				case c <- struct{}{}:
				default: // a gain is pending there already
				}
			}
		},
		OnStoppedLeading: func() {
			l.mu.Lock()
			l.leading.Store(false)
			l.mu.Unlock()
		},
	}
}

// Leading reports whether this replica holds the lease.
func (l *leaseElector) Leading() bool { return l.leading.Load() }

// Gained returns a channel of the caller's own that receives a value each
// time this replica takes the lease from then on.
func (l *leaseElector) Gained() <-chan struct{} {
	c := make(chan struct{}, 1)
	l.mu.Lock()
	l.gained = append(l.gained, c)
	l.mu.Unlock()
	return c
}

// NeedLeaderElection is false: it is the election.
func (l *leaseElector) NeedLeaderElection() bool { return false }

// Start campaigns for the lease until ctx ends, again after each loss, and
// releases it on the way out.
func (l *leaseElector) Start(ctx context.Context) error {
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: l.lock, LeaseDuration: l.lease, RenewDeadline: l.renew, RetryPeriod: l.retry,
			ReleaseOnCancel: true,
			Name:            l.name,
			Callbacks:       l.callbacks(),
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx)
	}
	return nil
}

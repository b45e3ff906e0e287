package app

import "sigs.k8s.io/controller-runtime/pkg/manager"

// Every runnable the picker adds to the manager runs on every replica,
// leader or not: each one serves, scrapes and routes on its own.
var (
	_ manager.LeaderElectionRunnable = (*healthRunnable)(nil)
	_ manager.LeaderElectionRunnable = (*notifyTicker)(nil)
	_ manager.LeaderElectionRunnable = replicaRunnable{}
	_ manager.LeaderElectionRunnable = (*clientCAs)(nil)
	_ manager.LeaderElectionRunnable = (*grpcServer)(nil)
	_ manager.Runnable               = (*httpServer)(nil)
)

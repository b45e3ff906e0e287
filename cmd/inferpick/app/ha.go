package app

// High-availability modes (--ha-mode), which matter only with
// --ha-enable-leader-election.
//
// Active-active is the default: every replica is ready and routes, so losing
// one loses only the streams it carried, a rollout can surge, and N replicas
// route as one would without talking to each other (each counts its own
// requests exactly, reads the others' load from the model servers' figures,
// and sends a prefix no replica has learned to the same rendezvous home; see
// picker/policy). The lease then only decides who records Events.
//
// Active-passive is the upstream endpoint picker's behaviour: only the
// elected replica reports ready, so the Service sends every stream to it; a
// failover waits up to a lease duration and a rollout needs Recreate.
//
// Both modes run the picker's own election (lease.go), not the manager's. At
// SIGTERM a replica gives the lease up as its drain begins, so in
// active-passive mode a standby becomes ready within a retry period while
// the old leader's streams finish. A replica that loses the lease (it cannot
// renew it, say while the API server is away) stops its leader work and, in
// active-passive mode, reports not ready, but keeps serving the streams it
// has and campaigns again; it never exits for it.
const (
	HAActiveActive  = "active-active"
	HAActivePassive = "active-passive"
)

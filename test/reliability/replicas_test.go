package reliability

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferpick/inferpick/picker/health"
	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// leaseArgs run a replica under leader election, active-active (the
// default), with a short lease.
var leaseArgs = []string{"--ha-enable-leader-election", "--leader-election-lease-duration", "4s",
	"--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "500ms"}

// replicaSet is a pool of simulated pods served by several picker replicas
// behind one gateway whose ext_proc service is the cluster of all of them.
type replicaSet struct {
	ns       string
	pods     []string // pod names
	sims     []*sim
	replicas []*picker
	g        *gw
}

// startReplicaSet starts pods simulators on hosts, their pool, n replicas
// (every one ready and listing every pod) and the gateway.
func startReplicaSet(t *testing.T, c *cluster, hosts []string, n int) *replicaSet {
	t.Helper()
	rs := &replicaSet{ns: c.Namespace(t)}
	port := framework.FreePortT(t, hosts...)
	if err := c.Client.Create(t.Context(), framework.MakePool(rs.ns, "pool").Ports(int32(port)).Obj()); err != nil {
		t.Fatal(err)
	}
	for i, h := range hosts {
		rs.sims = append(rs.sims, startSim(t, h, port))
		name := "vllm-" + strconv.Itoa(i)
		c.ReadyPod(t, framework.MakePod(rs.ns, name).Obj(), h)
		rs.pods = append(rs.pods, name)
	}
	var addrs, healthAddrs []string
	for range n {
		p := startClusterPicker(t, c, rs.ns, "pool", leaseArgs...)
		rs.replicas = append(rs.replicas, p)
		addrs = append(addrs, p.Addr())
		healthAddrs = append(healthAddrs, "127.0.0.1:"+strconv.Itoa(p.HealthPort))
	}
	for i, p := range rs.replicas {
		p.WaitWorkers(t, len(hosts))
		eventually(t, 60*time.Second, func() error {
			if !p.Serving(t.Context(), "readiness") {
				return fmt.Errorf("replica %d is not ready", i)
			}
			return nil
		})
	}
	// The gateway checks the replicas' readiness as the Service in front of
	// them would: a replica restarting takes no stream until it is ready.
	rs.g = startClusterGateway(t, addrs, gateway.WithPickerCluster(gateway.PickerCluster{
		Consecutive: 1, Ejection: time.Second, Retry: true,
		HealthCheck: &gateway.HealthCheck{Addrs: healthAddrs, Service: health.Readiness, Interval: 50 * time.Millisecond},
	}))
	return rs
}

// startClusterGateway is startGateway over several picker replicas.
func startClusterGateway(t *testing.T, addrs []string, opts ...gateway.Option) *gw {
	t.Helper()
	g := framework.StartClusterGatewayT(t, addrs, opts...)
	return &gw{Gateway: g, client: g.Client}
}

// load sends streamed completions from clients goroutines until finish is
// called; finish stops them, waits, logs the streams each replica carried,
// and reports how many requests were sent and how many did not answer 200.
func (rs *replicaSet) load(t *testing.T, clients int) (finish func() (sent, failed int64)) {
	t.Helper()
	stop := make(chan struct{})
	var sent, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 16))
			shared := "a shared system prompt of tenant " + strconv.Itoa(i%3) + " " + randomPrompt(r, 40)
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				code, body, err := rs.g.Complete(t.Context(), completion(shared+randomPrompt(r, 4), 8, true))
				if err != nil || code != http.StatusOK {
					failed.Add(1)
					t.Logf("request: %d %v %.200s", code, err, body)
				}
			}
		})
	}
	return func() (int64, int64) {
		close(stop)
		wg.Wait()
		return sent.Load(), failed.Load()
	}
}

// served reports whether a record is a complete, processed 200 answer.
func served(r gateway.Record) bool {
	return r.Status == http.StatusOK && !r.Reset && r.ProcessingError == nil && !r.ClientGone
}

// waitRecorded waits until at least n more requests than now have finished.
func (rs *replicaSet) waitRecorded(t *testing.T, n int) {
	t.Helper()
	rs.g.WaitRecords(t, len(rs.g.Records())+n)
}

// TestReplicaKillUnderLoad kills one of three active-active replicas while
// they route: only requests whose stream it carried may fail, the others
// keep routing over every pod, and the survivors end with exact counts.
func TestReplicaKillUnderLoad(t *testing.T) {
	c := sharedCluster(t)
	rs := startReplicaSet(t, c, []string{"127.0.0.90", "127.0.0.91", "127.0.0.92"}, 3)
	finish := rs.load(t, 6)
	rs.waitRecorded(t, 60)

	victim := rs.replicas[1]
	victim.Kill()
	rs.waitRecorded(t, 120)
	sent, failed := finish()

	perPicker := map[string]int{}
	var onVictim, failedOnVictim int
	for _, r := range rs.g.Records() {
		switch {
		case r.Picker == victim.Addr():
			onVictim++
			if !served(r.Record) {
				failedOnVictim++
			}
		case !served(r.Record):
			t.Errorf("a request on replica %q failed: status %d, reset %v, error %v", r.Picker, r.Status, r.Reset, r.ProcessingError)
		default:
			perPicker[r.Picker]++
		}
	}
	t.Logf("sent %d, %d failed; on the killed replica %d (%d failed); served by the others %v", sent, failed, onVictim, failedOnVictim, perPicker)
	if failed != int64(failedOnVictim) {
		t.Errorf("%d requests failed at the client, %d of them on the killed replica", failed, failedOnVictim)
	}
	for _, i := range []int{0, 2} {
		if perPicker[rs.replicas[i].Addr()] == 0 {
			t.Errorf("replica %d served nothing", i)
		}
	}
	for _, i := range []int{0, 2} {
		rs.replicas[i].WaitIdle(t, 30*time.Second)
		checkReleases(t, rs.replicas[i])
	}
}

// TestRollingRestartOfReplicasUnderLoad restarts every replica in turn,
// each stopped gracefully and ready again before the next, while clients
// keep sending: no request fails.
func TestRollingRestartOfReplicasUnderLoad(t *testing.T) {
	c := sharedCluster(t)
	rs := startReplicaSet(t, c, []string{"127.0.0.93", "127.0.0.94", "127.0.0.95"}, 3)
	finish := rs.load(t, 6)
	rs.waitRecorded(t, 30)
	for i, p := range rs.replicas {
		p.Restart(t, false)
		p.WaitWorkers(t, len(rs.sims))
		eventually(t, 60*time.Second, func() error {
			if !p.Serving(t.Context(), "readiness") {
				return fmt.Errorf("replica %d is not ready after its restart", i)
			}
			return nil
		})
		rs.waitRecorded(t, 30)
	}
	sent, failed := finish()
	if failed != 0 {
		t.Errorf("%d of %d requests failed during the rolling restart", failed, sent)
	}
	for _, r := range rs.g.Records() {
		if !served(r.Record) {
			t.Errorf("request on replica %q: status %d, reset %v, error %v", r.Picker, r.Status, r.Reset, r.ProcessingError)
		}
	}
	for _, p := range rs.replicas {
		p.WaitIdle(t, 30*time.Second)
		checkReleases(t, p)
	}
}

// TestWorkerRemovedWhileReplicasDisagree removes a pod while one replica is
// frozen and still lists it: the other stops routing to it at once, the
// frozen one, once it thaws, routes to it until its own watch catches up
// (the terminating pod's server still answers), every request succeeds,
// and both end listing the same pods with exact counts.
func TestWorkerRemovedWhileReplicasDisagree(t *testing.T) {
	c := sharedCluster(t)
	hosts := []string{"127.0.0.96", "127.0.0.97", "127.0.0.98"}
	rs := startReplicaSet(t, c, hosts, 2)
	finish := rs.load(t, 4)
	rs.waitRecorded(t, 30)

	// Replica 1 freezes: it sees nothing of what follows until it thaws.
	frozen := rs.replicas[1]
	if err := syscall.Kill(frozen.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pod := framework.MakePod(rs.ns, rs.pods[2]).Obj()
	if err := c.Client.Delete(t.Context(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	rs.replicas[0].WaitWorkers(t, 2)
	// The clients' requests on the frozen replica wait for it; those on
	// the other avoid the removed pod.
	if err := syscall.Kill(frozen.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	frozen.WaitWorkers(t, 2)
	rs.waitRecorded(t, 30)
	sent, failed := finish()
	if failed != 0 {
		t.Errorf("%d of %d requests failed while the replicas disagreed about a removed pod", failed, sent)
	}
	want := map[string]bool{net.JoinHostPort(hosts[0], portOf(t, rs.sims[0])): true, net.JoinHostPort(hosts[1], portOf(t, rs.sims[1])): true}
	for i, p := range rs.replicas {
		v := p.WaitWorkers(t, 2)
		for _, w := range v.Workers {
			if !want[w.Address] {
				t.Errorf("replica %d still lists %s", i, w.Address)
			}
		}
		p.WaitIdle(t, 30*time.Second)
		checkReleases(t, p)
	}
}

func portOf(t *testing.T, s *sim) string {
	t.Helper()
	_, port, err := net.SplitHostPort(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TestReplicasOutliveTheirLease stops the API server for longer than the
// lease: the leader cannot renew and loses it, yet every active-active
// replica keeps running, ready and routing over the pods it knew.
func TestReplicasOutliveTheirLease(t *testing.T) {
	c := ownCluster(t)
	rs := startReplicaSet(t, c, []string{"127.0.0.99", "127.0.0.100"}, 2)
	apiserver := crashAPIServer(t, c)
	// Past the lease duration (4 s) and its renew deadline (3 s), from now.
	lost := time.Now().Add(8 * time.Second)
	r := rand.New(rand.NewPCG(9, 9))
	for i := 0; time.Now().Before(lost) || i < 20; i++ {
		if code, body, err := rs.g.Complete(t.Context(), completion(randomPrompt(r, 4), 4, i%2 == 0)); err != nil || code != http.StatusOK {
			t.Fatalf("request %d with the API server down: %d %v %s", i, code, err, body)
		}
	}
	for i, p := range rs.replicas {
		if p.Exited() {
			t.Fatalf("replica %d exited when the lease could not be renewed:\n%s", i, p.Output())
		}
		if !p.Serving(t.Context(), "readiness") {
			t.Errorf("replica %d is not ready", i)
		}
		p.WaitIdle(t, 30*time.Second)
	}
	if err := apiserver.Start(); err != nil {
		t.Fatal(err)
	}
}

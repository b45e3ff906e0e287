package reliability

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/framework"
)

// activePassiveArgs run a replica under leader election in active-passive
// mode, with a short lease and a drain long enough for any stream here.
var activePassiveArgs = []string{"--ha-enable-leader-election", "--ha-mode", "active-passive", "--leader-election-lease-duration", "4s",
	"--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "500ms", "--drain-timeout", "60s"}

// startActivePassive starts a simulator on host (20 ms a token), its pool in
// a namespace of c and two active-passive replicas, and returns them with
// the index of the one that became the leader.
func startActivePassive(t *testing.T, c *cluster, host string) (replicas []*picker, leader int) {
	t.Helper()
	ns := c.Namespace(t)
	s := startSim(t, host, 0, "--time-scale", "1")
	_, portStr, err := net.SplitHostPort(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Create(t.Context(), framework.MakePool(ns, "pool").Ports(int32(port)).Obj()); err != nil {
		t.Fatal(err)
	}
	c.ReadyPod(t, framework.MakePod(ns, "vllm-0").Obj(), host)
	replicas = []*picker{startClusterPicker(t, c, ns, "pool", activePassiveArgs...), startClusterPicker(t, c, ns, "pool", activePassiveArgs...)}
	eventually(t, 60*time.Second, func() error {
		var ready []int
		for i, p := range replicas {
			if p.Serving(t.Context(), "readiness") {
				ready = append(ready, i)
			}
		}
		if len(ready) != 1 {
			return fmt.Errorf("replicas ready: %v, want exactly one", ready)
		}
		leader = ready[0]
		return nil
	})
	return replicas, leader
}

// streamResult is how a streamed completion ended.
type streamResult struct {
	took time.Duration
	err  error
}

// longStream streams a completion of tokens tokens through g and reports
// how it ended: err is nil when it finished with [DONE].
func longStream(ctx context.Context, g *gw, tokens int) <-chan streamResult {
	res := make(chan streamResult, 1)
	start := time.Now()
	go func() {
		res <- streamResult{err: readStream(ctx, g, tokens), took: time.Since(start)}
	}()
	return res
}

func readStream(ctx context.Context, g *gw, tokens int) error {
	resp, err := g.Post(ctx, "/v1/completions", completion("a long one", tokens, true), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return fmt.Errorf("after %d bytes: %w", len(body), err)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, body)
	case !strings.Contains(string(body), "[DONE]"):
		return fmt.Errorf("cut after %d bytes", len(body))
	}
	return nil
}

// waitInFlight waits until p counts a request in flight.
func waitInFlight(t *testing.T, p *picker) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		v, err := p.Workers()
		if err != nil {
			return err
		}
		for i := range v.Workers {
			if v.Workers[i].Load > 0 {
				return nil
			}
		}
		return fmt.Errorf("no request in flight")
	})
}

// TestActivePassiveLeaderHandsOverAtSIGTERM: a leader told to stop gives
// its lease up as its drain begins, so the standby is ready within a retry
// period while the old leader's stream runs to its end. The lease used to be
// held through the whole drain, leaving no replica ready for as long as the
// longest stream.
func TestActivePassiveLeaderHandsOverAtSIGTERM(t *testing.T) {
	c := sharedCluster(t)
	replicas, leader := startActivePassive(t, c, "127.0.0.49")
	old, standby := replicas[leader], replicas[1-leader]

	stream := longStream(t.Context(), startGateway(t, old.Addr()), 750) // 15 s
	waitInFlight(t, old)

	term := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- old.Process.Stop(90 * time.Second) }() // SIGTERM
	eventually(t, 10*time.Second, func() error {
		if old.Serving(t.Context(), "readiness") {
			return fmt.Errorf("the old leader still reports ready after SIGTERM")
		}
		return nil
	})
	// A lease released at SIGTERM is taken at the standby's next retry
	// (500 ms); 5 s is well within the stream's drain.
	took := eventually(t, 5*time.Second, func() error {
		if !standby.Serving(t.Context(), "readiness") {
			return fmt.Errorf("%s after SIGTERM to the draining leader, the standby is not ready",
				time.Since(term).Round(100*time.Millisecond))
		}
		return nil
	})
	t.Logf("the standby became ready %s after SIGTERM", took.Round(time.Millisecond))
	g := startGateway(t, standby.Addr())
	if code, body, err := g.Complete(t.Context(), completion("during the handover", 2, false)); err != nil || code != http.StatusOK {
		t.Errorf("request through the new leader: %d %v %s", code, err, body)
	}

	if r := <-stream; r.err != nil {
		t.Errorf("the old leader's stream, after %s: %v", r.took.Round(100*time.Millisecond), r.err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("the old leader did not stop after its drain: %v\n%s", err, old.Output())
	}
}

// TestActivePassiveLeaderOutlivesAnAPIServerOutage: the API server goes
// away for longer than the renew deadline. The leader loses its lease and
// turns not ready, but keeps running and its stream in flight finishes.
// The manager's election used to end the process at once, cutting it.
func TestActivePassiveLeaderOutlivesAnAPIServerOutage(t *testing.T) {
	c := ownCluster(t)
	replicas, leader := startActivePassive(t, c, "127.0.0.50")
	p := replicas[leader]

	stream := longStream(t.Context(), startGateway(t, p.Addr()), 600) // 12 s
	waitInFlight(t, p)
	apiserver := crashAPIServer(t, c)
	// Past the renew deadline (3 s): the lease is lost.
	eventually(t, 15*time.Second, func() error {
		if p.Serving(t.Context(), "readiness") {
			return fmt.Errorf("the leader still reports ready without its lease")
		}
		return nil
	})
	r := <-stream
	if r.err != nil {
		t.Errorf("the stream through the leader, after %s: %v", r.took.Round(100*time.Millisecond), r.err)
	}
	if p.Exited() {
		t.Fatalf("the leader exited when it lost the lease:\n%s", p.Output())
	}
	if !p.Serving(t.Context(), "liveness") {
		t.Error("the leader is not live after losing its lease")
	}
	if err := apiserver.Start(); err != nil {
		t.Fatal(err)
	}
	// With the API server back, some replica takes the lease again.
	eventually(t, 60*time.Second, func() error {
		for _, q := range replicas {
			if q.Serving(t.Context(), "readiness") {
				return nil
			}
		}
		return fmt.Errorf("no replica ready after the API server came back")
	})
}

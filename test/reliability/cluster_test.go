package reliability

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/inferpick/inferpick/test/framework"
)

// TestAPIServerRestart stops the API server under a running picker: the
// picker keeps routing over its last known endpoints, and after the
// restart it picks up the changes made since.
func TestAPIServerRestart(t *testing.T) {
	c := ownCluster(t)
	ns := c.Namespace(t)
	hosts := []string{"127.0.0.45", "127.0.0.46", "127.0.0.47"}
	port := framework.FreePortT(t, hosts...)
	for _, h := range hosts {
		startSim(t, h, port)
	}
	if err := c.Client.Create(t.Context(), framework.MakePool(ns, "pool").Ports(int32(port)).Obj()); err != nil {
		t.Fatal(err)
	}
	first := c.ReadyPod(t, framework.MakePod(ns, "vllm-0").Obj(), hosts[0])
	c.ReadyPod(t, framework.MakePod(ns, "vllm-1").Obj(), hosts[1])
	p := startClusterPicker(t, c, ns, "pool")
	p.WaitWorkers(t, 2)
	g := startGateway(t, p.Addr())

	// The API server crashes.
	apiserver := crashAPIServer(t, c)
	r := rand.New(rand.NewPCG(8, 8))
	for i := range 30 {
		if code, body, err := g.Complete(t.Context(), completion(randomPrompt(r, 4), 4, i%2 == 0)); err != nil || code != http.StatusOK {
			t.Fatalf("request %d with the API server down: %d %v %s", i, code, err, body)
		}
	}
	if !p.Serving(t.Context(), "readiness") {
		t.Errorf("the picker stopped reporting ready while the API server was down")
	}
	if err := apiserver.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()

	// Changes made after the restart reach the picker.
	if err := c.Client.Delete(t.Context(), first, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	c.ReadyPod(t, framework.MakePod(ns, "vllm-2").Obj(), hosts[2])
	want := []string{net.JoinHostPort(hosts[1], strconv.Itoa(port)), net.JoinHostPort(hosts[2], strconv.Itoa(port))}
	eventually(t, 90*time.Second, func() error {
		v, err := p.Workers()
		if err != nil {
			return err
		}
		var got []string
		for _, w := range v.Workers {
			got = append(got, w.Address)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("workers %v, want %v", got, want)
		}
		return nil
	})
	t.Logf("the picker resynced %s after the API server came back", time.Since(restarted).Round(time.Millisecond))
	p.WaitIdle(t, 30*time.Second)
	checkReleases(t, p)
}

// TestLeaderElection runs two replicas with leader election in
// active-passive mode: only the leader reports ready on `readiness`; when it
// is killed the other takes over within the lease time and routes.
func TestLeaderElection(t *testing.T) {
	c := sharedCluster(t)
	replicas, leader := startActivePassive(t, c, "127.0.0.48")
	follower := replicas[1-leader]
	// The follower stays not ready while the leader lives.
	for range 10 {
		if follower.Serving(t.Context(), "readiness") {
			t.Fatalf("both replicas report ready")
		}
		if !replicas[leader].Serving(t.Context(), "readiness") {
			t.Fatalf("the leader stopped reporting ready")
		}
	}
	if !follower.Serving(t.Context(), "liveness") {
		t.Errorf("the follower is not live")
	}

	replicas[leader].Kill()
	took := eventually(t, 60*time.Second, func() error {
		if !follower.Serving(t.Context(), "readiness") {
			return fmt.Errorf("the follower is not ready yet")
		}
		return nil
	})
	t.Logf("the follower became ready %s after the leader was killed (lease 4s)", took.Round(time.Millisecond))
	g := startGateway(t, follower.Addr())
	if code, body, err := g.Complete(t.Context(), completion("after failover", 2, false)); err != nil || code != http.StatusOK {
		t.Errorf("request through the new leader: %d %v %s", code, err, body)
	}
	follower.WaitIdle(t, 30*time.Second)
}

// TestMetricsEndpointAuth checks that in a cluster the metrics port (plain
// HTTP, as the upstream picker serves it), /debug/workers included, refuses
// callers without valid credentials:
// 401/403 without a token. An invalid token is refused too, with the 500
// controller-runtime's authentication filter answers when the TokenReview
// reports an error.
func TestMetricsEndpointAuth(t *testing.T) {
	c := sharedCluster(t)
	ns := c.Namespace(t)
	if err := c.Client.Create(t.Context(), framework.MakePool(ns, "pool").Ports(8000).Obj()); err != nil {
		t.Fatal(err)
	}
	p := startClusterPicker(t, c, ns, "pool", "--metrics-endpoint-auth=true")
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/metrics", "/debug/workers"} {
		for name, token := range map[string]string{"no token": "", "bad token": "not-a-token"} {
			eventually(t, 30*time.Second, func() error {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(p.metrics)+path, http.NoBody)
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				resp, err := hc.Do(req)
				if err != nil {
					return err // not listening yet
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				refused := resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden
				if token != "" {
					refused = refused || resp.StatusCode == http.StatusInternalServerError
				}
				if !refused || strings.Contains(string(body), "go_goroutines") || strings.Contains(string(body), "workers") {
					t.Errorf("%s with %s: status %d, want it refused: %.200s", path, name, resp.StatusCode, body)
				}
				return nil
			})
		}
	}
}

// procDir is where Linux lists its processes.
const procDir = "/proc"

// crashAPIServer kills the cluster's API server (SIGKILL) and has envtest
// note that it is gone, so that its Start runs it again.
func crashAPIServer(t *testing.T, c *cluster) *envtest.APIServer {
	t.Helper()
	apiserver := c.env.ControlPlane.GetAPIServer()
	killProcess(t, "kube-apiserver", apiserver.CertDir)
	// envtest reaps the process on a goroutine of its own; until that one
	// has seen the exit, Stop signals a process group that is gone (ESRCH).
	eventually(t, 30*time.Second, func() error {
		err := apiserver.Stop()
		if err != nil && !errors.Is(err, syscall.ESRCH) {
			return framework.Stop(err)
		}
		return err
	})
	return apiserver
}

// killProcess sends SIGKILL to the process named name whose command line
// mentions marker, and waits until it is gone.
func killProcess(t *testing.T, name, marker string) {
	t.Helper()
	dirs, err := os.ReadDir(procDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(procDir, d.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), name) || !strings.Contains(string(cmdline), marker) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			if stat, err := os.ReadFile(filepath.Join(procDir, d.Name(), "stat")); err == nil && !strings.Contains(string(stat), ") Z ") {
				return fmt.Errorf("%s (pid %d) is still running", name, pid)
			}
			return nil
		})
		return
	}
	t.Fatalf("no %s process mentions %s", name, marker)
}

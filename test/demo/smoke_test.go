package main

import (
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// smokeEnv switches the end-to-end run on; `make test-demo` sets it.
const smokeEnv = "DEMO_SMOKE"

// buildBinaries builds inferpick and vllm-sim from this checkout into dir.
func buildBinaries(t *testing.T, dir string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"./cmd/inferpick", "./cmd/vllm-sim"} {
		cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
}

// TestDemoSmoke runs the whole demo with a short workload: every Pod must
// serve requests, nothing may fail, and inferpick's in-flight load must be
// back to zero at the end although a tenth of the requests were abandoned
// mid-stream.
func TestDemoSmoke(t *testing.T) {
	if os.Getenv(smokeEnv) == "" {
		t.Skipf("the demo smoke test needs a control plane: run `make test-demo` (sets %s=1 and KUBEBUILDER_ASSETS)", smokeEnv)
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test-demo`, or set it to the directory printed by hack/controlplane.sh")
	}
	bin := t.TempDir()
	buildBinaries(t, bin)

	var out strings.Builder
	c := defaultConfig()
	c.ControlPlaneDir = assets
	c.BinDir = bin
	c.WorkDir = t.TempDir()
	c.CRDDir = filepath.Join("..", "..", "config", "crd", "bases")
	// Off the addresses `make demo` uses, so both can run at once.
	c.FirstIP = netip.MustParseAddr("127.0.0.111")
	c.GatewayAddr = "127.0.0.1:0"
	c.TimeScale = 0.2
	c.Workload.Requests = 40
	c.Workload.Concurrency = 8
	c.Quiet = true
	c.Out, c.Err = &out, io.Discard
	c.LoadDeadline = 30 * time.Second

	rep, err := run(t.Context(), c)
	t.Log(out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if !rep.Idle {
		t.Error("inferpick still counts requests in flight after the run")
	}
	if rep.Failed != 0 {
		t.Errorf("%d requests failed: %v", rep.Failed, rep.Errors)
	}
	if want := 4; rep.Aborted != want {
		t.Errorf("%d requests aborted, want %d", rep.Aborted, want)
	}
	for _, p := range rep.Pods {
		if p.Served == 0 || p.Sim.Requests == 0 {
			t.Errorf("pod %s (%s) served no request: gateway %d, simulator %d", p.Name, p.Address, p.Served, p.Sim.Requests)
		}
		if p.Load != 0 {
			t.Errorf("pod %s: load %d after the run", p.Name, p.Load)
		}
	}
	if !strings.Contains(out.String(), "0 on every pod") {
		t.Errorf("the report does not say the load is 0:\n%s", out.String())
	}
}

// TestMain lets the test binary stand in for the control plane the way the
// demo's own binary does (see runShim).
func TestMain(m *testing.M) {
	runShim()
	os.Exit(m.Run())
}

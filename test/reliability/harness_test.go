package reliability

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/inferpick/inferpick/test/framework"
)

// The suite's helpers live in one file per concern: processes and polling
// (process_helpers_test.go), simulators (sim_helpers_test.go), the picker
// and its metrics (picker_helpers_test.go), the gateway stand-in
// (gateway_helpers_test.go), load accounting (accounting_helpers_test.go)
// and the API server (apiserver_helpers_test.go). Each is a thin layer over
// test/framework.

// bins holds the binaries TestMain builds once for the whole suite.
var bins struct{ picker, sim string }

// TestMain builds inferpick and vllm-sim (with the race detector when
// RELIABILITY_RACE=1) and runs the suite against those processes.
func TestMain(m *testing.M) {
	crlog.SetLogger(logr.Discard()) // envtest logs through controller-runtime
	var flags []string
	if os.Getenv("RELIABILITY_RACE") == "1" {
		flags = append(flags, "-race")
	}
	var err error
	ctx := context.Background()
	if bins.picker, err = framework.BinaryErr(ctx, framework.PickerPackage, flags...); err == nil {
		bins.sim, err = framework.BinaryErr(ctx, framework.SimPackage, flags...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		framework.RemoveBinaries()
		os.Exit(1)
	}
	code := m.Run()
	shared.stop()
	framework.RemoveBinaries()
	os.Exit(code)
}

// repoRoot is the directory holding go.mod.
func repoRoot() string { return framework.RepoRoot() }

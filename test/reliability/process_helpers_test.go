package reliability

import (
	"context"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/framework"
)

// proc is a child process whose output goes to a log file.
type proc struct{ *framework.Process } //nolint:unused // kept for tests written against the old harness

// startProc runs bin with args; the test's cleanup stops it and prints its
// output's tail when the test failed.
func startProc(t testing.TB, //nolint:unused // kept for tests written against the old harness
	name, bin string, args ...string) *proc {
	t.Helper()
	return &proc{framework.StartT(t, framework.Cmd{Name: name, Path: bin, Args: args})}
}

// Output returns everything the process wrote so far.
func (p *proc) Output() string { return p.Log() } //nolint:unused // kept with proc

// Stop sends SIGTERM and waits, killing the process (and failing the test)
// after framework.StopGrace.
func (p *proc) Stop(t testing.TB) { //nolint:unused // kept with proc
	t.Helper()
	if err := p.Process.Stop(framework.StopGrace); err != nil {
		t.Error(err)
	}
}

// eventually polls f until it returns nil, failing the test with f's last
// error after timeout; it returns how long that took.
func eventually(t testing.TB, timeout time.Duration, f func() error) time.Duration {
	t.Helper()
	return framework.Eventually(t, timeout, "condition", f)
}

// freePort returns a TCP port free on 127.0.0.1 at the time of the call.
func freePort(t testing.TB) int { //nolint:unused // kept for tests written against the old harness
	t.Helper()
	return framework.FreePortT(t)
}

// freePortOn returns a port free on every one of hosts.
func freePortOn(t testing.TB, hosts ...string) int {
	t.Helper()
	return framework.FreePortT(t, hosts...)
}

func getJSON(url string, v any) error { //nolint:unused // kept for tests written against the old harness
	return framework.GetJSON(context.Background(), url, v)
}

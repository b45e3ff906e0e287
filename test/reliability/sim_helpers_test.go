package reliability

import (
	"context"
	"testing"

	"github.com/inferpick/inferpick/test/framework"
)

// sim is a vllm-sim process.
type sim struct {
	*framework.Sim
	host string
	addr string // ip:port
}

// simArgs are the defaults of the suite's simulators: fast, 16 output
// tokens of 2 ms each.
var simArgs = []string{"--time-scale", "0.1", "--default-max-tokens", "16"}

// startSim runs a simulator on host:port (0: any port) and waits for its
// announce line.
func startSim(t testing.TB, host string, port int, extra ...string) *sim {
	t.Helper()
	s := framework.StartSimT(t, bins.sim, host, port, append(append([]string(nil), simArgs...), extra...)...)
	return &sim{Sim: s, host: host, addr: s.Addr}
}

// simStats is the part of GET /sim/stats the suite reads.
type simStats = framework.SimStats

// Stats reads the simulator's counters.
func (s *sim) Stats() (simStats, error) { return s.Sim.Stats(context.Background()) }

// Output returns everything the simulator wrote so far.
func (s *sim) Output() string { return s.Log() }

// Stop sends SIGTERM and waits, failing the test when it had to kill.
func (s *sim) Stop(t testing.TB) {
	t.Helper()
	if err := s.Process.Stop(framework.StopGrace); err != nil {
		t.Error(err)
	}
}

// SetFaults patches the simulator's faults (fields of its faults JSON).
func (s *sim) SetFaults(t testing.TB, patch map[string]any) {
	t.Helper()
	if err := s.Sim.SetFaults(t.Context(), patch); err != nil {
		t.Fatal(err)
	}
}

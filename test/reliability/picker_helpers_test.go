package reliability

import (
	"context"
	"fmt"
	"testing"

	"github.com/inferpick/inferpick/picker/observe"
	"github.com/inferpick/inferpick/test/framework"
)

// picker is an inferpick process with its ports on 127.0.0.1.
type picker struct {
	*framework.Picker
	metrics int // the metrics port
}

// startPicker runs inferpick in plain gRPC with args added (mode flags
// such as --static-endpoints among them).
func startPicker(t testing.TB, args ...string) *picker {
	t.Helper()
	p := framework.StartPickerT(t, bins.picker, args...)
	return &picker{Picker: p, metrics: p.MetricsPort}
}

// Output returns everything the picker wrote so far (since its last
// restart).
func (p *picker) Output() string { return p.Log() }

// Stop sends SIGTERM and waits, failing the test when it had to kill.
func (p *picker) Stop(t testing.TB) {
	t.Helper()
	if err := p.Process.Stop(framework.StopGrace); err != nil {
		t.Error(err)
	}
}

// Workers reads /debug/workers (plain HTTP on the metrics port).
func (p *picker) Workers() (observe.WorkersView, error) {
	return p.Picker.Workers(context.Background())
}

// Worker reads the view of the worker at addr from /debug/workers, an
// error when it is not listed.
func (p *picker) Worker(addr string) (observe.WorkerView, error) {
	v, err := p.Workers()
	if err != nil {
		return observe.WorkerView{}, err
	}
	for i := range v.Workers {
		if v.Workers[i].Address == addr {
			return v.Workers[i], nil
		}
	}
	return observe.WorkerView{}, fmt.Errorf("worker %s is not listed", addr)
}

// Metrics reads the Prometheus page of the metrics port.
func (p *picker) Metrics() (promPage, error) {
	return p.Picker.Metrics(context.Background())
}

// promPage is a parsed Prometheus text page.
type promPage = framework.Metrics

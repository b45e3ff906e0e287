package flowcontrol

import (
	"flag"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPriorities(t *testing.T) {
	type lookup struct {
		Prio  int
		Known bool
	}
	p := NewPriorities()
	p.Set("chat", 10)
	p.Set("batch", -1)
	p.Set("chat", 5)
	p.Delete("batch")
	p.Delete("never-set")
	got := map[string]lookup{}
	for _, n := range []string{"chat", "batch", "never-set"} {
		v, ok := p.Priority(n)
		got[n] = lookup{v, ok}
	}
	want := map[string]lookup{"chat": {5, true}, "batch": {}, "never-set": {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lookups (-want +got):\n%s", diff)
	}
}

func TestAddFlags(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--flow-control-max-requests=10", "--flow-control-max-wait=2s"}); err != nil {
		t.Fatal(err)
	}
	want := Options{MaxBandLen: DefaultMaxBandLen, MaxLen: 10, MaxBytes: DefaultMaxBytes, MaxWait: 2 * time.Second}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

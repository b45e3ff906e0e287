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

// A static priority (--objective-priorities) gives way to an
// InferenceObjective of the same name while the objective is there, and
// comes back when it is deleted or stops naming the pool; the name is not
// forgotten.
func TestStaticPriorityComesBackWhenTheObjectiveGoes(t *testing.T) {
	type lookup struct {
		Prio  int
		Known bool
	}
	p := NewPriorities()
	p.SetStatic("batch", -1)
	p.SetStatic("chat", 10)
	get := func() map[string]lookup {
		got := map[string]lookup{}
		for _, n := range []string{"batch", "chat"} {
			v, ok := p.Priority(n)
			got[n] = lookup{v, ok}
		}
		return got
	}
	p.Delete("batch") // an objective named batch for another pool
	if diff := cmp.Diff(map[string]lookup{"batch": {-1, true}, "chat": {10, true}}, get()); diff != "" {
		t.Errorf("after an objective that never applied was dropped (-want +got):\n%s", diff)
	}
	p.Set("chat", 3)
	p.SetStatic("chat", 7) // the objective still gives the name's priority
	if diff := cmp.Diff(map[string]lookup{"batch": {-1, true}, "chat": {3, true}}, get()); diff != "" {
		t.Errorf("with an objective named chat (-want +got):\n%s", diff)
	}
	p.Delete("chat")
	if diff := cmp.Diff(map[string]lookup{"batch": {-1, true}, "chat": {7, true}}, get()); diff != "" {
		t.Errorf("after the objective named chat was deleted (-want +got):\n%s", diff)
	}
}

func TestAddFlags(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--flow-control-max-requests=10", "--flow-control-max-wait=2s", "--flow-control-ordering=slo-deadline"}); err != nil {
		t.Fatal(err)
	}
	want := Options{MaxBandLen: DefaultMaxBandLen, MaxLen: 10, MaxBytes: DefaultMaxBytes, MaxWait: 2 * time.Second, Ordering: OrderDeadline}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

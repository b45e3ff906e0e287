package extproc

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
)

// fakeLocator answers every prompt with holds, or err, and records what it
// was asked.
type fakeLocator struct {
	mu     sync.Mutex
	holds  []policy.SharedHold
	err    error
	models []string
	inputs []string
}

func (l *fakeLocator) Locate(_ context.Context, model string, r *openai.Request, dst *policy.Shared) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.models = append(l.models, model)
	l.inputs = append(l.inputs, string(r.Input))
	if l.err != nil {
		return false, l.err
	}
	dst.Holds = append(dst.Holds[:0], l.holds...)
	return true, nil
}

func TestLocatorIsAskedOnlyAboutPromptsThePolicyDoesNotKnow(t *testing.T) {
	holds := []policy.SharedHold{{Worker: 7, Share: 0.5}}
	cases := map[string]struct {
		known     bool
		err       error
		wantAsked bool
		want      *policy.Shared
	}{
		"known prompt":           {known: true},
		"unknown prompt":         {wantAsked: true, want: &policy.Shared{Holds: holds}},
		"unknown, lookup failed": {err: errors.New("tokenize: connection refused"), wantAsked: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			loc := &fakeLocator{holds: holds, err: tc.err}
			e := newEnv(t, []string{"127.0.0.1:8000", "127.0.0.2:8000"}, func(o *Options) { o.Locator = loc })
			var got *policy.Shared
			e.picker.knows = func(*policy.Request) bool { return tc.known }
			e.picker.seen = func(r *policy.Request) {
				if r.Shared != nil {
					c := *r.Shared
					c.Holds = append([]policy.SharedHold(nil), c.Holds...)
					got = &c
				}
			}
			body := chatBody("llama", strings.Repeat("a long shared prompt ", 20))
			s := e.open()
			s.requestHeaders("/v1/chat/completions", len(body), false, nil)
			s.requestBody(body, true)
			if r := s.routed(true); r.dest == "" || string(r.body) != body {
				t.Fatalf("not routed as sent: destination %q, body %q", r.dest, r.body)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("what the policy was told (-want +got):\n%s", diff)
			}
			if asked := len(loc.models) > 0; asked != tc.wantAsked {
				t.Fatalf("locator asked: %v, want %v", asked, tc.wantAsked)
			}
			if tc.wantAsked {
				wantInput := body[strings.Index(body, `[{"role"`) : len(body)-1]
				if loc.models[0] != "llama" || loc.inputs[0] != wantInput {
					t.Errorf("asked about model %q, input %q; want llama, %q", loc.models[0], loc.inputs[0], wantInput)
				}
			}
		})
	}
}

// steppingLocator is a locator whose lookup takes took on clk: a /tokenize
// call to a model server.
type steppingLocator struct {
	clk  *clocktesting.FakePassiveClock
	took time.Duration
}

func (l steppingLocator) Locate(context.Context, string, *openai.Request, *policy.Shared) (bool, error) {
	l.clk.SetTime(l.clk.Now().Add(l.took))
	return false, nil
}

// The pick latency a dashboard and the p99 alert read covers the time from
// the end of the request body to the routing decision, the prompt's lookup
// on the model servers included: a slow /tokenize call shows there.
func TestPickLatencyCoversThePromptsLookup(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	e := newEnv(t, []string{"127.0.0.1:8000"}, func(o *Options) {
		o.Clock = clk
		o.Locator = steppingLocator{clk: clk, took: 40 * time.Millisecond}
	})
	e.picker.knows = func(*policy.Request) bool { return false }
	e.picker.seen = func(*policy.Request) { clk.SetTime(clk.Now().Add(time.Millisecond)) }
	body := chatBody("llama", "hello")
	s := e.open()
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	s.requestBody(body, true)
	s.routed(true)

	families, err := e.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		switch f.GetName() {
		case "inference_extension_scheduler_e2e_duration_seconds", "inferpick_pick_duration_seconds":
			got[f.GetName()] = f.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	want := map[string]float64{
		"inference_extension_scheduler_e2e_duration_seconds": 0.041,
		"inferpick_pick_duration_seconds":                    0.041,
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("pick latency recorded, in seconds (-want +got):\n%s", diff)
	}
}

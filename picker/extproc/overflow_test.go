package extproc

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// A pool whose every endpoint's fresh metrics are past both the queue and
// the KV-cache thresholds. Without the flow-control queue, as the upstream
// picker without its flow-control layer, a request of priority 0 or above
// is routed all the same (to the model servers' own queues) and only a
// sheddable one (negative priority) gets 429; maxInFlight stays a hard cap.
// With the queue, a request waits for room. A 429 is counted only for a
// request refused, and a refused or waiting request holds no guard.
func TestSaturatedPoolAdmission(t *testing.T) {
	const (
		routed = "routed"
		queued = "queued"
		shed   = "429"
	)
	cases := map[string]struct {
		queue       bool
		objective   string
		maxInFlight int
		held        int // requests already in flight on each endpoint
		want        string
	}{
		"priority 0 is routed":                          {want: routed},
		"a prioritized request is routed":               {objective: "interactive", want: routed},
		"a sheddable request gets 429":                  {objective: "batch", want: shed},
		"every endpoint at maxInFlight gets 429":        {maxInFlight: 2, held: 2, want: shed},
		"an endpoint under maxInFlight takes it":        {maxInFlight: 2, held: 1, want: routed},
		"with flow control priority 0 waits":            {queue: true, want: queued},
		"with flow control a sheddable request is shed": {queue: true, objective: "batch", want: shed},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			prios := flowcontrol.NewPriorities()
			prios.Set("interactive", 10)
			prios.Set("batch", -1)
			var q *flowcontrol.Queue
			if tc.queue {
				var err error
				if q, err = flowcontrol.New(flowcontrol.Options{Enabled: true}); err != nil {
					t.Fatal(err)
				}
				go func() { _ = q.Start(t.Context()) }()
			}
			e := newEnv(t, twoWorkers, func(o *Options) {
				o.Priorities, o.MaxInFlight = prios, tc.maxInFlight
				if q != nil {
					o.Queue = q
				}
			})
			pol, err := policy.Build(policy.Config{MaxInFlight: tc.maxInFlight}, e.reg)
			if err != nil {
				t.Fatal(err)
			}
			e.server.picker = pol
			ws := e.reg.Workers()
			for _, w := range ws {
				w.SetMetrics(&registry.Metrics{Waiting: 5, KVUsage: 0.8, Scraped: time.Now()})
				for range tc.held {
					g := w.Admit()
					t.Cleanup(func() { g.Release() })
				}
			}

			s := e.open()
			s.sendRequest(tc.objective)
			switch tc.want {
			case routed:
				if r := s.routed(true); r.dest == "" {
					t.Fatal("routed without a destination")
				}
			case queued:
				eventually(t, "the request queued", func() bool { return q.Len() == 1 })
			case shed:
				if code, msg := s.immediateReply(); code != 429 {
					t.Fatalf("got %d %s, want 429", code, msg)
				} else if !strings.Contains(msg, "saturated") {
					t.Errorf("429 reason %q does not say the pool is saturated", msg)
				}
			}
			wantInFlight := int64(2 * tc.held)
			if tc.want == routed {
				wantInFlight++
			}
			if got := ws[0].InFlight() + ws[1].InFlight(); got != wantInFlight {
				t.Errorf("%d requests in flight, want %d", got, wantInFlight)
			}
			want429 := 0.0
			if tc.want == shed {
				want429 = 1
			}
			if got := testutil.ToFloat64(e.server.metrics.requests.WithLabelValues("429")); got != want429 {
				t.Errorf("inferpick_requests_total{code=\"429\"} = %v, want %v", got, want429)
			}
		})
	}
}

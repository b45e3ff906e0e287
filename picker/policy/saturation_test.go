package policy

import (
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
)

// The pool's saturation rises as its workers fill, reaching 1 when every
// worker takes no more work, and reads only fresh metrics.
func TestSaturationFollowsHowFullTheWorkersAre(t *testing.T) {
	cfg := Config{MaxInFlight: 4}.Default()
	fresh := func(waiting int, kv float64) *registry.Metrics {
		return &registry.Metrics{Waiting: waiting, KVUsage: kv, Scraped: epoch.Add(-time.Second)}
	}
	cases := map[string]struct {
		inFlight []int
		metrics  []*registry.Metrics
		want     float64
	}{
		"idle":                       {inFlight: []int{0, 0}, want: 0},
		"one worker half full":       {inFlight: []int{2, 0}, want: 0.25},
		"one worker at its bound":    {inFlight: []int{4, 0}, want: 0.5},
		"every worker at its bound":  {inFlight: []int{4, 4}, want: 1},
		"over the bound counts once": {inFlight: []int{8, 0}, want: 0.5},
		"a full queue and KV cache": {
			inFlight: []int{0, 0},
			metrics:  []*registry.Metrics{fresh(DefaultQueueThreshold, 0.9), nil},
			want:     0.5,
		},
		"a full queue, KV cache half the threshold": {
			inFlight: []int{0, 0},
			metrics:  []*registry.Metrics{fresh(2*DefaultQueueThreshold, DefaultKVCacheThreshold/2), nil},
			want:     0.25,
		},
		"stale metrics are not read": {
			inFlight: []int{0, 0},
			metrics:  []*registry.Metrics{{Waiting: 100, KVUsage: 1, Scraped: epoch.Add(-time.Hour)}, nil},
			want:     0,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ws := pool(len(tc.inFlight))
			for i, n := range tc.inFlight {
				admit(t, ws[i], n)
				if i < len(tc.metrics) && tc.metrics[i] != nil {
					ws[i].SetMetrics(tc.metrics[i])
				}
			}
			if got := cfg.Saturation(ws, epoch); got != tc.want {
				t.Errorf("Saturation = %v, want %v", got, tc.want)
			}
		})
	}
	if got := cfg.Saturation(nil, epoch); got != 1 {
		t.Errorf("Saturation of no workers = %v, want 1", got)
	}
}

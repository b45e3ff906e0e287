package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/registry"
)

// A worker whose scrapes fail (an overloaded vLLM whose /metrics times
// out) is scored from what this picker knows of it, its own requests in
// flight there, and never as an idle server: it takes its turn while it
// holds no more than the fresh workers and loses it while it holds more.
func TestWeightedScorerWorkerWithoutFreshMetrics(t *testing.T) {
	fresh := &registry.Metrics{Waiting: 0, Running: 2, KVUsage: 0.2, Scraped: epoch}
	// Last scraped 10 s ago, when it was already near saturation.
	stale := &registry.Metrics{Waiting: 40, Running: 64, KVUsage: 0.99, Scraped: epoch.Add(-10 * time.Second)}
	for name, tc := range map[string]struct {
		metrics  *registry.Metrics // of the third worker; the others are fresh
		inFlight int               // held on the third worker before the picks
		picks    int
		min, max int // picks the third worker may take, each held in flight
	}{
		"stale metrics: a share, not all": {metrics: stale, picks: 60, min: 10, max: 20},
		"stale metrics, holding more":     {metrics: stale, inFlight: 10, picks: 20, max: 0},
		"never scraped: a share, not all": {picks: 60, min: 10, max: 20},
		"never scraped, holding more":     {inFlight: 10, picks: 20, max: 0},
	} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(3)
			ws[0].SetMetrics(fresh)
			ws[1].SetMetrics(fresh)
			if tc.metrics != nil {
				ws[2].SetMetrics(tc.metrics)
			}
			admit(t, ws[2], tc.inFlight)
			p := build(t, Config{Name: WeightedScorer}, reg, nil)
			got := weightedPicks(t, p, ws, tc.picks)
			if n := got[2]; n < tc.min || n > tc.max {
				t.Errorf("the worker without fresh metrics took %d of %d picks, want %d to %d (picks per worker %v)", n, tc.picks, tc.min, tc.max, got)
			}
		})
	}
}

// With no fresh metrics at all, the weighted scorer ranks by this picker's
// requests in flight, the only load it knows.
func TestWeightedScorerNoFreshMetricsRanksByInFlight(t *testing.T) {
	stale := &registry.Metrics{Waiting: 0, KVUsage: 0.1, Scraped: epoch.Add(-10 * time.Second)}
	for name, tc := range map[string]struct {
		metrics  []*registry.Metrics // per worker; nil for never scraped
		inFlight []int               // held on each worker before the picks
		picks    int
		want     []int // picks per worker, each held in flight
	}{
		"all stale": {
			metrics:  []*registry.Metrics{stale, stale, stale},
			inFlight: []int{4, 0, 2},
			picks:    24,
			want:     []int{6, 10, 8},
		},
		"stale and never scraped": {
			metrics:  []*registry.Metrics{stale, nil, nil},
			inFlight: []int{0, 3, 6},
			picks:    12,
			want:     []int{7, 4, 1},
		},
	} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(len(tc.metrics))
			for i, w := range ws {
				if m := tc.metrics[i]; m != nil {
					w.SetMetrics(m)
				}
				admit(t, w, tc.inFlight[i])
			}
			p := build(t, Config{Name: WeightedScorer}, reg, nil)
			if diff := cmp.Diff(tc.want, weightedPicks(t, p, ws, tc.picks)); diff != "" {
				t.Errorf("picks per worker (-want +got):\n%s", diff)
			}
		})
	}
}

// weightedPicks makes n picks of distinct prompts over ws, holding each
// in flight on its pick, and counts them per worker.
func weightedPicks(t *testing.T, p Policy, ws []*registry.Worker, n int) []int {
	t.Helper()
	got := make([]int, len(ws))
	for i := range n {
		out, err := p.Pick(chat(fmt.Sprint("sys", i), fmt.Sprint("u", i), 512, 256), ws, 1)
		if err != nil {
			t.Fatal(err)
		}
		for j, w := range ws {
			if w == out[0] {
				got[j]++
			}
		}
		admit(t, out[0], 1)
	}
	return got
}

package routing

import (
	"math"
	"testing"
	"time"
)

func TestQuantileAllCountsUnansweredRequestsAsSlowest(t *testing.T) {
	answered := []float64{0.5, 0.1, 0.4, 0.2, 0.3, 0.9, 0.8, 0.7, 0.6}
	cases := map[string]struct {
		sent int
		want float64
	}{
		"all answered":        {sent: 9, want: 0.8},
		"one of ten refused":  {sent: 10, want: 0.9},
		"two of eleven unmet": {sent: 11, want: math.Inf(1)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &Result{Sent: tc.sent, TTFT: answered}
			if got := r.QuantileAll(0.9); got != tc.want {
				t.Errorf("QuantileAll(0.9) = %v, want %v", got, tc.want)
			}
			if got := r.Quantile(0.9); got != 0.8 {
				t.Errorf("Quantile(0.9) = %v, want 0.8 (answered requests only)", got)
			}
		})
	}
}

// TestTTFTScalesOnlyTheEnginesTime: at a time scale of 0.1, a request
// answered with headers after 5 ms of wall time and a first token 20 ms
// later spent 5 ms of this host's time and 200 ms of the engine's.
func TestTTFTScalesOnlyTheEnginesTime(t *testing.T) {
	answered, first := 5*time.Millisecond, 25*time.Millisecond
	for _, tc := range []struct {
		scaleAll bool
		want     float64
	}{{false, 0.205}, {true, 0.25}} {
		d := &driver{scale: 0.1, scaleAll: tc.scaleAll}
		if got := d.simulated(answered, first); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("scaleAll %v: TTFT %v s, want %v s", tc.scaleAll, got, tc.want)
		}
	}
}

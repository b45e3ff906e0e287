package routing

import (
	"math"
	"testing"
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

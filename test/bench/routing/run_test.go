package routing

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/gateway"
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

func TestQuantileFromCountsRequestsSentSinceThen(t *testing.T) {
	r := &Result{TTFT: []float64{0.9, 0.8, 0.1, 0.3, 0.2}, SentAt: []float64{0, 1, 4, 4.5, 9}}
	if got := r.QuantileFrom(0.9, 4); got != 0.3 {
		t.Errorf("QuantileFrom(0.9, 4) = %v, want 0.3 (the three sent at 4 s or later)", got)
	}
	if got := r.QuantileFrom(0.9, 0); got != r.Quantile(0.9) {
		t.Errorf("QuantileFrom(0.9, 0) = %v, want Quantile's %v", got, r.Quantile(0.9))
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

// A pinned workload names each request's pod to the gateway in the subset
// hint header, the pod's ip:port.
func TestPinnedRequestsNameTheirPod(t *testing.T) {
	var got []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get(gateway.SubsetHintHeader))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	spec := SimSpec{Pods: 4, FirstIP: 40, Port: 18000, TimeScale: 1}
	c := &Cluster{spec: spec, gwAddr: strings.TrimPrefix(srv.URL, "http://")}
	d := &driver{c: c, scale: 1, client: srv.Client(), ttftBy: map[string][]float64{}, refBy: map[string]int{},
		pin: func(r Request) int { return len(r.Messages[0].Content) }}
	for _, n := range []int{1, 6} {
		if !d.send(t.Context(), Request{Messages: []Message{{Role: "system", Content: strings.Repeat("x", n)}}}) {
			t.Fatalf("request pinned to pod %d failed", n)
		}
	}
	hints := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	// Pod 6 of 4 wraps to pod 2.
	if got, want := hints(), []string{"127.0.0.41:18000", "127.0.0.42:18000"}; !slices.Equal(got, want) {
		t.Errorf("subset hints = %q, want %q", got, want)
	}

	d.pin = nil
	if !d.send(t.Context(), Request{Messages: []Message{{Role: "user", Content: "x"}}}) {
		t.Fatal("unpinned request failed")
	}
	if h := hints(); h[len(h)-1] != "" {
		t.Errorf("an unpinned request sent subset hint %q, want none", h[len(h)-1])
	}
}

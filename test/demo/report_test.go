package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	cases := map[string]struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		"empty":                   {sorted: nil, p: 50, want: 0},
		"one value is every rank": {sorted: ms(7), p: 90, want: 7 * time.Millisecond},
		"median of odd count":     {sorted: ms(1, 2, 3, 4, 5), p: 50, want: 3 * time.Millisecond},
		"median of even count is the lower middle": {sorted: ms(1, 2, 3, 4), p: 50, want: 2 * time.Millisecond},
		"p90 of ten is the ninth":                  {sorted: ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), p: 90, want: 9 * time.Millisecond},
		"p90 of eleven rounds the rank up":         {sorted: ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), p: 90, want: 10 * time.Millisecond},
		"p100 is the maximum":                      {sorted: ms(1, 2, 30), p: 100, want: 30 * time.Millisecond},
		"tiny p is the minimum":                    {sorted: ms(4, 5, 6), p: 0.1, want: 4 * time.Millisecond},
		"zero p is zero":                           {sorted: ms(4, 5, 6), p: 0, want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("percentile(%v, %g) = %v, want %v", tc.sorted, tc.p, got, tc.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	outs := []outcome{
		{ID: 0, TTFT: 30 * time.Millisecond},
		{ID: 1, TTFT: 10 * time.Millisecond, Aborted: true},
		{ID: 2, Err: errors.New("request 2: status 503: no endpoint")},
		{ID: 3, TTFT: 20 * time.Millisecond},
	}
	var r report
	r.summarize(outs)
	want := report{
		Requests: 4, Completed: 2, Aborted: 1, Failed: 1,
		Errors: []string{"request 2: status 503: no endpoint"},
		TTFT:   []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond},
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("summarize (-want +got):\n%s", diff)
	}
}

func TestGroupList(t *testing.T) {
	cases := map[string]struct {
		groups map[int]int
		want   string
	}{
		"none":                       {groups: map[int]int{}, want: "-"},
		"busiest first":              {groups: map[int]int{5: 3, 2: 40, 7: 12}, want: "g2:40 g7:12 g5:3"},
		"ties by group":              {groups: map[int]int{3: 4, 1: 4}, want: "g1:4 g3:4"},
		"more than four are counted": {groups: map[int]int{0: 9, 1: 8, 2: 7, 3: 6, 4: 5, 5: 4}, want: "g0:9 g1:8 g2:7 g3:6 +2 more"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := groupList(tc.groups); got != tc.want {
				t.Errorf("groupList(%v) = %q, want %q", tc.groups, got, tc.want)
			}
		})
	}
}

func TestReportWrite(t *testing.T) {
	base := report{
		Policy: "cache-aware", Groups: 2, Concurrency: 4, Elapsed: 12345 * time.Millisecond,
		Requests: 10, Completed: 8, Aborted: 1, Failed: 1,
		Errors: []string{"request 4: status 503"},
		TTFT:   []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond},
		Pods: []podRow{
			{Name: "vllm-0", Address: "127.0.0.11:8000", Served: 6, Groups: map[int]int{0: 6},
				Sim: simStats{PromptTokens: 1000, CachedTokens: 900, Aborted: 1}},
			{Name: "vllm-1", Address: "127.0.0.12:8000", Served: 4, Groups: map[int]int{1: 3, 0: 1},
				Sim: simStats{PromptTokens: 1000, CachedTokens: 500}},
		},
		Idle: true,
	}
	table := `
10 streaming chat requests (2 shared system prompts, 4 in flight) through the gateway in 12.3s, policy cache-aware

pod     address          requests  prefix groups (group:requests)  KV cache hit rate  aborted at pod  load after run
vllm-0  127.0.0.11:8000  6         g0:6                            90.0%              1               0
vllm-1  127.0.0.12:8000  4         g1:3 g0:1                       50.0%              0               0
all                      10                                        70.0%              1               0

time to first token, seen by the client: p50 20ms, p90 200ms (3 requests)
completed 8, aborted by the client mid-stream 1, failed 1
  failure: request 4: status 503
`
	leaky := base
	leaky.Idle = false
	leaky.Pods = append([]podRow(nil), base.Pods...)
	leaky.Pods[1].Load, leaky.Pods[1].Prefill, leaky.Pods[1].Decode = 2, 1, 1

	cases := map[string]struct {
		r    report
		want string
	}{
		"idle": {r: base, want: table + "in-flight load held by inferpick after the run: 0 on every pod\n"},
		"leak is shown loudly": {r: leaky, want: strings.Replace(strings.Replace(table,
			"50.0%              0               0\n", "50.0%              0               2\n", 1),
			"70.0%              1               0\n", "70.0%              1               2\n", 1) + `
!!! LOAD LEAK: inferpick still counts requests in flight after the run:
!!!   vllm-1 (127.0.0.12:8000): load 2 (prefill 1, decode 1)
`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			if err := tc.r.write(&b); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHitRateWithoutTokens(t *testing.T) {
	if got := hitRate(0, 0); got != "-" {
		t.Errorf("hitRate(0, 0) = %q, want \"-\"", got)
	}
}

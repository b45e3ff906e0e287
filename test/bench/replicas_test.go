package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/bench/routing"
)

// One of three 3-replica runs has a p90 far above the others': the verdict
// compares the median with one replica's, and the table shows the range.
func TestReplicaVerdictsCompareMedians(t *testing.T) {
	cell := func(n int, pol string, rs ...*routing.Result) *replicaCell {
		for _, r := range rs {
			r.Workload, r.OK = "shared-prefix@18", len(r.TTFT)
			for i := range r.TTFT {
				r.SentAt = append(r.SentAt, float64(i)) // a request a second
			}
		}
		return &replicaCell{Replicas: n, Policy: pol, Workload: "shared-prefix@18", runs: rs}
	}
	rr := &replicaReport{cells: []*replicaCell{
		cell(1, "cache-aware", result(1.00, 0.90), result(1.02, 0.92), result(0.98, 0.91)),
		cell(3, "cache-aware", result(1.05, 0.89), result(5.00, 0.50), result(1.08, 0.88)),
	}}
	var hit, ttft *verdict
	vs := replicaVerdicts(rr)
	for i := range vs {
		switch vs[i].target {
		case "3 replicas: shared-prefix@18 hit rate ≥ 0.95 × one replica's":
			hit = &vs[i]
		case "3 replicas: shared-prefix@18 TTFT p90 ≤ 1.1 × one replica's":
			ttft = &vs[i]
		}
	}
	if hit == nil || !hit.known || !hit.met || hit.observed != "0.880 vs 0.910 (ratio 0.97)" {
		t.Errorf("hit verdict %+v, want met on the medians 0.880 vs 0.910", hit)
	}
	if ttft == nil || !ttft.known || !ttft.met || ttft.observed != "1.080 s vs 1.000 s (ratio 1.08; 0 of 10 requests took over 1.100 s, one picker's 0, the target allows 1)" {
		t.Errorf("TTFT verdict %+v, want met on the medians 1.080 s vs 1.000 s", ttft)
	}
	md := replicasMarkdown(rr)
	if row := "| 3 | cache-aware | shared-prefix@18 | 30/30 | 0.880 | 1.080 | 1.080 | 1.050–5.000 | 1.080 | 1.080 |"; !strings.Contains(md, row) {
		t.Errorf("table lacks the row %q:\n%s", row, md)
	}
}

// Three replicas leave two of ten requests slow where one replica left one:
// the p90 (the ninth of ten) lands on a slow one, and the verdict counts the
// requests over the bound against the one the target allows.
func TestReplicaP90VerdictCountsTheRequestsOverTheBound(t *testing.T) {
	rr := &replicaReport{cells: []*replicaCell{
		{Replicas: 1, Policy: "cache-aware", Workload: "multi-turn", runs: []*routing.Result{coldRun(1, 0.1), coldRun(1, 0.1), coldRun(1, 0.1)}},
		{Replicas: 3, Policy: "cache-aware", Workload: "multi-turn", runs: []*routing.Result{coldRun(2, 0.1), coldRun(3, 0.1), coldRun(1, 0.1)}},
	}}
	for _, v := range replicaVerdicts(rr) {
		if v.target != "3 replicas: multi-turn TTFT p90 ≤ 1.1 × one replica's" {
			continue
		}
		want := "0.700 s vs 0.100 s (ratio 7.00; 2 of 10 requests took over 0.110 s, one picker's 1, the target allows 1)"
		if !v.known || v.met || v.observed != want {
			t.Errorf("verdict %+v, want missed with %q", v, want)
		}
		return
	}
	t.Fatal("no multi-turn TTFT verdict")
}

// coldRun is a run of ten requests, a second apart, whose first slow ones
// take 0.7 s and the rest warm.
func coldRun(slow int, warm float64) *routing.Result {
	r := &routing.Result{Workload: "multi-turn", Sent: 10}
	for i := range 10 {
		r.TTFT = append(r.TTFT, warm)
		r.SentAt = append(r.SentAt, float64(i))
		if i < slow {
			r.TTFT[i] = 0.7
		}
	}
	r.OK = len(r.TTFT)
	return r
}

// A missed replica TTFT target's explanation in the report opens with the
// figures of the run it is in: the warm p90s and the runs whose servers
// publish events as a step starts, none of them written into the
// explanation's text.
func TestMissedReplicaTargetOpensWithItsRunsFigures(t *testing.T) {
	rr := &replicaReport{cells: []*replicaCell{
		{Replicas: 1, Policy: "cache-aware", Workload: "multi-turn", runs: []*routing.Result{coldRun(1, 0.1)}},
		{Replicas: 3, Policy: "cache-aware", Workload: "multi-turn", runs: []*routing.Result{coldRun(3, 0.12)}},
		{Replicas: 1, Policy: whenScheduled, Workload: "multi-turn", runs: []*routing.Result{coldRun(1, 0.2)}},
		{Replicas: 3, Policy: whenScheduled, Workload: "multi-turn", runs: []*routing.Result{coldRun(2, 0.3)}},
	}}
	md := (&report{replicas: rr}).markdown(t.TempDir())
	why, _ := missedBecause("3 replicas: multi-turn TTFT p90")
	want := "- **3 replicas: multi-turn TTFT p90 ≤ 1.1 × one replica's**: In this run, over the requests sent from 4 s " +
		"into the run on (column p90 from 4 s), three replicas' TTFT p90 is 0.120 s against one picker's 0.100 s " +
		"(1.20×). With servers that publish a step's events as it starts (rows \"cache-aware, events when " +
		"scheduled\"), the whole run's is 0.700 s against 0.200 s. " + strings.ToUpper(why[:1]) + why[1:] + "\n"
	if !strings.Contains(md, want) {
		t.Errorf("report lacks\n%s\nin:\n%s", want, md)
	}
}

// A run whose first requests waited for cold prefills: the table's last
// column leaves them out, counting only the requests sent once the run is
// warm.
func TestReplicaTableShowsTheWarmP90(t *testing.T) {
	r := &routing.Result{Workload: "shared-prefix@18", Sent: 10, OK: 10,
		TTFT:   []float64{0.7, 0.6, 0.5, 0.1, 0.1, 0.2, 0.1, 0.1, 0.2, 0.1},
		SentAt: []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}
	md := replicasMarkdown(&replicaReport{cells: []*replicaCell{{Replicas: 3, Policy: "cache-aware", Workload: r.Workload, runs: []*routing.Result{r}}}})
	if row := "| 3 | cache-aware | shared-prefix@18 | 10/10 | 0.000 | 0.100 | 0.600 | 0.600–0.600 | 0.700 | 0.200 |"; !strings.Contains(md, row) {
		t.Errorf("table lacks the row %q:\n%s", row, md)
	}
}

// Two explanations start the multi-turn target's text: the longer one is
// its own, whatever order the map yields them in.
func TestMissedBecauseTakesTheLongestKey(t *testing.T) {
	mt, _ := missedBecause("3 replicas: multi-turn TTFT p90 ≤ 1.1 × one replica's")
	sp, _ := missedBecause("3 replicas: shared-prefix@18 TTFT p90 ≤ 1.1 × one replica's")
	for range 50 {
		if got, ok := missedBecause("3 replicas: multi-turn TTFT p90 ≤ 1.1 × one replica's"); !ok || got != explanations["3 replicas: multi-turn TTFT p90"] {
			t.Fatalf("multi-turn's explanation: got %.60q", got)
		}
	}
	if mt == sp || sp != explanations["3 replicas:"] {
		t.Errorf("shared-prefix@18's explanation is %.60q, multi-turn's %.60q", sp, mt)
	}
	if _, ok := missedBecause("no such target"); ok {
		t.Error("an unknown target has an explanation")
	}
}

// A rolling restart of three replicas stops them at a quarter, half and
// three quarters of the arrivals; for sessions, of their turns' think time.
func TestRestartsSpreadOverTheRun(t *testing.T) {
	open := &routing.Workload{Kind: routing.Open, Requests: []routing.Request{{At: 0}, {At: 16 * time.Second}, {At: 9 * time.Second}}}
	if got, want := restartTimes(3, open), []time.Duration{4 * time.Second, 8 * time.Second, 12 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("open workload: restarts at %v, want %v", got, want)
	}
	sessions := &routing.Workload{Kind: routing.Sessions, Think: time.Second, Sessions: [][]routing.Request{make([]routing.Request, 6), make([]routing.Request, 4)}}
	if got, want := restartTimes(3, sessions), []time.Duration{1500 * time.Millisecond, 3 * time.Second, 4500 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("sessions: restarts at %v, want %v", got, want)
	}
}

// The rolling rows are told apart from the others, and what the restarts
// cost is summed over the runs: a failed request or a replica left with a
// count shows.
func TestRollingRowsSayWhatTheRestartsCost(t *testing.T) {
	restart := func(failed int, idle error, at ...float64) *routing.RestartReport {
		r := &routing.RestartReport{Failed: failed, Idle: idle}
		for i, a := range at {
			r.At = append(r.At, time.Duration(a*float64(time.Second)))
			r.Took = append(r.Took, time.Duration(i+1)*100*time.Millisecond)
		}
		return r
	}
	rr := &replicaReport{cells: []*replicaCell{
		{Replicas: 3, Policy: "cache-aware", Workload: "multi-turn", runs: []*routing.Result{coldRun(1, 0.1)}},
		{Replicas: 3, Policy: rolling, Workload: "multi-turn", runs: []*routing.Result{coldRun(1, 0.1), coldRun(1, 0.1)},
			restarts: []*routing.RestartReport{restart(0, nil, 1.5, 3.0, 4.5), restart(0, nil, 1.7, 3.2, 4.5)}},
		{Replicas: 3, Policy: rollingReplay, Workload: "multi-turn", runs: []*routing.Result{coldRun(1, 0.1), coldRun(1, 0.1)},
			restarts: []*routing.RestartReport{restart(1, nil, 1.5, 3.0, 4.5), restart(0, errors.New("replica 2: pod-1 has 1"), 1.5, 3.0, 4.5)}},
	}}
	md := replicasMarkdown(rr)
	for _, want := range []string{
		"| 3 | " + rolling + " | multi-turn | 20/20 |",
		"- " + rolling + ", multi-turn: replicas stopped at 1.6, 3.1, 4.5 s; each away for at most 0.30 s (stop, drain, start, first scrapes);\n  0 of 20 requests failed; every replica ended idle.",
		"- " + rollingReplay + ", multi-turn: replicas stopped at 1.5, 3.0, 4.5 s; each away for at most 0.30 s (stop, drain, start, first scrapes);\n  1 of 20 requests failed; **not every replica ended idle**.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the replica section lacks %q:\n%s", want, md)
		}
	}
	if strings.Count(md, "(stop, drain, start, first scrapes)") != 2 {
		t.Errorf("a cell without restarts is described as restarted:\n%s", md)
	}
}

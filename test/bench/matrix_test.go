package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferpick/inferpick/test/bench/routing"
)

// result is a run whose every request was answered in p90 seconds (so its
// TTFT p90 is p90), at hit rate hit.
func result(p90, hit float64) *routing.Result {
	return &routing.Result{Sent: 10, TTFT: []float64{p90, p90, p90, p90, p90, p90, p90, p90, p90, p90}, HitRate: hit, Oracle: 0.9}
}

// threeRuns is three runs of p90 seconds each at hit rate 0.9.
func threeRuns(p90 float64) []*routing.Result {
	return []*routing.Result{result(p90, 0.9), result(p90, 0.9), result(p90, 0.9)}
}

// cellWith is a shared-prefix run of a roomy cell holding the runs given
// per policy.
func cellWith(runs map[string][]*routing.Result) matrixRun {
	return matrixRun{Cell: matrixCell{1000, 4, 16}, Workload: "shared-prefix@4", Runs: runs}
}

func TestMatrixComparesMedians(t *testing.T) {
	// Cache-aware is slower than the weighted scorer in its worst run and
	// faster in the other two: the median decides.
	m := cellWith(map[string][]*routing.Result{
		"cache-aware":     {result(0.30, 0.9), result(0.20, 0.9), result(0.21, 0.9)},
		"weighted-scorer": {result(0.22, 0.9), result(0.25, 0.9), result(0.23, 0.9)},
		"round-robin":     {result(2, 0.1)},
	})
	med, lo, hi, ok := m.p90("cache-aware")
	if !ok || med != 0.21 || lo != 0.20 || hi != 0.30 {
		t.Fatalf("cache-aware p90 = %v (%v–%v, %v), want the median 0.21 of 0.20–0.30", med, lo, hi, ok)
	}
	if r := m.median("cache-aware"); r.QuantileAll(0.9) != 0.21 {
		t.Errorf("cache-aware's result has p90 %v, want the run of median p90 (0.21)", r.QuantileAll(0.9))
	}
	c := m.check()
	if !c.known || !c.vsWeighted || !c.vsRR || !c.hitOK {
		t.Errorf("check = %+v, want every target met by the medians", c)
	}
	if got, want := m.p90Cell("cache-aware"), "0.210 (0.200–0.300)"; got != want {
		t.Errorf("table cell = %q, want %q", got, want)
	}
	if got, want := m.p90Cell("round-robin"), "2.000"; got != want {
		t.Errorf("table cell of a policy run once = %q, want %q", got, want)
	}

	// Two slow runs of three make the median slow: missed.
	m = cellWith(map[string][]*routing.Result{
		"cache-aware":     {result(0.30, 0.9), result(0.20, 0.9), result(0.29, 0.9)},
		"weighted-scorer": {result(0.22, 0.9), result(0.25, 0.9), result(0.23, 0.9)},
		"round-robin":     {result(2, 0.1)},
	})
	if c := m.check(); c.vsWeighted {
		t.Errorf("check = %+v, want the weighted-scorer target missed (median 0.29 against 0.23)", c)
	}
}

func TestMatrixUnansweredCountsAsNever(t *testing.T) {
	never := &routing.Result{Sent: 10, TTFT: []float64{0.1, 0.1, 0.1, 0.1, 0.1}}
	m := cellWith(map[string][]*routing.Result{
		"cache-aware":     {never, never, result(0.1, 0.9)},
		"weighted-scorer": {result(0.2, 0.9)},
		"round-robin":     {result(2, 0.1)},
	})
	if med, _, _, _ := m.p90("cache-aware"); !math.IsInf(med, 1) {
		t.Fatalf("median p90 = %v, want +Inf when most runs left a tenth unanswered", med)
	}
	if c := m.check(); c.vsWeighted || c.vsRR {
		t.Errorf("check = %+v, want the p90 targets missed", c)
	}
	if got, want := m.p90Cell("cache-aware"), "never (5 of 10 unanswered)"; got != want {
		t.Errorf("table cell = %q, want %q", got, want)
	}
}

func TestMatrixOracleUsesMedianHits(t *testing.T) {
	// A cache of 1.5 prompts per pod holds fewer than the 16 prompts: the
	// oracle is the best median hit rate any policy reached.
	m := cellWith(map[string][]*routing.Result{
		"cache-aware":     {result(0.2, 0.60), result(0.2, 0.50), result(0.2, 0.55)},
		"weighted-scorer": {result(0.3, 0.70), result(0.3, 0.40), result(0.3, 0.45)},
		"round-robin":     {result(2, 0.1)},
	})
	m.Cell.Cache = 1.5
	if got := m.oracle(); got != 0.55 {
		t.Errorf("oracle = %v, want cache-aware's median hit 0.55, not the weighted scorer's one lucky run", got)
	}
	if !m.check().hitOK {
		t.Errorf("hit target missed at the oracle's own median")
	}
}

func TestCloseCallsRunEveryRound(t *testing.T) {
	for _, tc := range []struct {
		workload, label string
		want            bool
	}{
		{"shared-prefix@4", "cache-aware", true},
		{"multi-turn", "weighted-scorer", true},
		{"no-sharing@4", "least-load", true},
		{"shared-prefix@4", "least-load", false},
		{"multi-turn", "round-robin", false},
	} {
		if got := closeCall(tc.workload, tc.label); got != tc.want {
			t.Errorf("closeCall(%q, %q) = %v, want %v", tc.workload, tc.label, got, tc.want)
		}
	}
}

// A cell runs more rounds when cache-aware's median lies within 10% of
// its bound on either side, whichever way it leans, and not otherwise.
func TestCloseVerdictsGetMoreRuns(t *testing.T) {
	for _, tc := range []struct {
		name         string
		workload     string
		ca, other    float64 // medians; other is the weighted scorer's, or least-load's on no-sharing
		wantMoreRuns bool
	}{
		{"cache-aware 5% over the weighted scorer", "multi-turn", 0.210, 0.200, true},
		{"cache-aware 5% under the weighted scorer", "shared-prefix@4", 0.190, 0.200, true},
		{"cache-aware far under", "shared-prefix@4", 0.100, 0.200, false},
		{"cache-aware far over", "multi-turn", 0.300, 0.200, false},
		{"no-sharing near 1.05 × least-load", "no-sharing@4", 0.200, 0.190, true},
		{"no-sharing far under", "no-sharing@4", 0.150, 0.200, false},
	} {
		m := cellWith(map[string][]*routing.Result{"cache-aware": threeRuns(tc.ca), comparedWith(tc.workload): threeRuns(tc.other), "round-robin": {result(2, 0.1)}})
		m.Workload = tc.workload
		if got := m.closeVerdict(); got != tc.wantMoreRuns {
			t.Errorf("%s: closeVerdict = %v, want %v", tc.name, got, tc.wantMoreRuns)
		}
	}
	never := cellWith(map[string][]*routing.Result{
		"cache-aware":     {{Sent: 10, TTFT: []float64{0.1}}},
		"weighted-scorer": threeRuns(0.2),
	})
	if never.closeVerdict() {
		t.Error("closeVerdict = true for a cache-aware that left most requests unanswered, want false")
	}
}

// Where a cell ran its close call again at the slower time scale, those
// runs decide the weighted-scorer and no-sharing verdicts, whichever way
// they go, while round-robin is still compared with the first runs.
func TestCloseRunsDecideTheCloseVerdict(t *testing.T) {
	m := cellWith(map[string][]*routing.Result{
		"cache-aware": threeRuns(0.21), "weighted-scorer": threeRuns(0.20), "round-robin": {result(0.40, 0.1)},
	})
	if c := m.check(); c.vsWeighted || c.vsRR {
		t.Fatalf("check = %+v before the close runs, want both p90 targets missed (0.21 against 0.20 and 0.5 × 0.40)", c)
	}
	m.Close = map[string][]*routing.Result{"cache-aware": threeRuns(0.09), "weighted-scorer": threeRuns(0.10)}
	if c := m.check(); !c.vsWeighted || c.vsRR {
		t.Errorf("check = %+v, want the weighted scorer's met by the close runs (0.09 against 0.10) and round-robin's "+
			"still missed by the first runs' 0.21", c)
	}
	if got, want := m.closeCell(), "0.090 vs 0.100 (3 runs)"; got != want {
		t.Errorf("close column = %q, want %q", got, want)
	}
	if r, ok := m.p90Ratio("weighted-scorer"); !ok || math.Abs(r-0.9) > 1e-9 {
		t.Errorf("plotted ratio to the weighted scorer = %v, %v; want 0.9 from the close runs", r, ok)
	}

	m.Close = map[string][]*routing.Result{"cache-aware": threeRuns(0.11), "weighted-scorer": threeRuns(0.10)}
	m.Runs["cache-aware"] = threeRuns(0.19)
	if c := m.check(); c.vsWeighted {
		t.Errorf("check = %+v, want the weighted scorer's missed by the close runs (0.11 against 0.10) though the first met it", c)
	}

	ns := cellWith(map[string][]*routing.Result{"cache-aware": threeRuns(0.20), "least-load": threeRuns(0.18)})
	ns.Workload = "no-sharing@4"
	if ns.check().noHarm {
		t.Fatal("no-sharing 0.20 against 1.05 × 0.18 met, want missed")
	}
	ns.Close = map[string][]*routing.Result{"cache-aware": threeRuns(0.18), "least-load": threeRuns(0.18)}
	if !ns.check().noHarm {
		t.Error("no-sharing close runs 0.18 against 1.05 × 0.18 missed, want met")
	}
	if got, want := ns.closeCell(), "0.180 vs 0.180 (3 runs)"; got != want {
		t.Errorf("no-sharing close column = %q, want %q", got, want)
	}
	if got := cellWith(map[string][]*routing.Result{"cache-aware": threeRuns(0.1)}).closeCell(); got != "–" {
		t.Errorf("close column of a cell without close runs = %q, want a dash", got)
	}
}

// The matrix section says how close calls were decided only when some
// were, and gives the table a column for them.
func TestMatrixMarkdownNamesTheCloseRuns(t *testing.T) {
	m := cellWith(map[string][]*routing.Result{
		"cache-aware": threeRuns(0.21), "weighted-scorer": threeRuns(0.20), "round-robin": {result(2, 0.1)},
	})
	md := matrixMarkdown([]matrixRun{m}, "docs/bench")
	if strings.Contains(md, "time\nscale 0.2") || strings.Contains(md, "times more each") {
		t.Errorf("matrix section names close runs no cell ran:\n%s", md)
	}
	m.Close = map[string][]*routing.Result{"cache-aware": threeRuns(0.09), "weighted-scorer": threeRuns(0.10)}
	md = matrixMarkdown([]matrixRun{m}, "docs/bench")
	for _, want := range []string{"ran 3 times more each at time\nscale 0.2", "| at 0.2 | verdict |", "| 0.090 vs 0.100 (3 runs) | met |"} {
		if !strings.Contains(md, want) {
			t.Errorf("matrix section lacks %q:\n%s", want, md)
		}
	}
}

// A target over several benchmarks shows the highest of them, the one
// that decides the verdict.
func TestWorstReportsTheHighest(t *testing.T) {
	r := &report{gobench: []goBench{
		{Name: "BenchmarkIndexMemory/blocks=1048576", Median: map[string]float64{"B/block": 22.2}},
		{Name: "BenchmarkIndexMemory/blocks=1215000", Median: map[string]float64{"B/block": 22.7}},
		{Name: "BenchmarkIndexMemory/blocks=1310720", Median: map[string]float64{"B/block": 22.2}},
	}}
	v := r.worst("index", "BenchmarkIndexMemory", "B/block", 24, "%.1f B/block")
	if want := "22.7 B/block (`BenchmarkIndexMemory/blocks=1215000`)"; !v.met || v.observed != want {
		t.Errorf("verdict %+v, want met and %q", v, want)
	}
	r.gobench[1].Median["B/block"] = 25
	if v := r.worst("index", "BenchmarkIndexMemory", "B/block", 24, "%.1f B/block"); v.met {
		t.Errorf("verdict %+v, want missed", v)
	}
}

// The exchange targets hold only when every stream count meets them, and
// a size the load test did not run is not measured.
func TestExchangeTargetHoldsAtEveryStreamCount(t *testing.T) {
	at := func(streams, size int, cpu float64) loadResult {
		return loadResult{PromptBytes: size, Streams: streams, Requests: 1000, Seconds: 1, PickerCPU: cpu * 1000}
	}
	r := &report{load: []loadResult{at(8, 1<<10, 130e-6), at(32, 1<<10, 80e-6), at(8, 32<<10, 200e-6), at(32, 32<<10, 150e-6)}}
	got := map[string]verdict{}
	for _, v := range r.verdicts() {
		got[v.target] = v
	}
	for target, want := range map[string]struct{ known, met bool }{
		"full ext_proc exchange ≤ 100.0 µs picker CPU, 1 KB body (#17)":  {true, false},
		"full ext_proc exchange ≤ 300.0 µs picker CPU, 32 KB body (#17)": {true, true},
		"full ext_proc exchange ≤ 2.40 ms picker CPU, 400 KB body (#17)": {false, false},
	} {
		v, ok := got[target]
		if !ok {
			t.Fatalf("no verdict %q", target)
		}
		if v.known != want.known || v.met != want.met {
			t.Errorf("%s: known %v, met %v (%q); want %v, %v", target, v.known, v.met, v.observed, want.known, want.met)
		}
	}
}

// Pinned pairs put two system prompts on each pod and every request of a
// prompt on its prompt's pod.
func TestPinPairsPutsTwoPromptsOnEachPod(t *testing.T) {
	w := routing.SharedPrefix(routing.SharedPrefixSpec{Groups: 16, SystemBytes: 100, QuestionByte: 20, Requests: 300, Rate: 4, Seed: 18})
	pin := pinPairs(w)
	podOf := map[string]int{}
	prompts := map[int]int{}
	for _, r := range w.Requests {
		sys, pod := r.Messages[0].Content, pin(r)
		if was, ok := podOf[sys]; ok && was != pod {
			t.Fatalf("one system prompt pinned to pods %d and %d", was, pod)
		} else if !ok {
			podOf[sys] = pod
			prompts[pod]++
		}
	}
	if len(prompts) != 8 {
		t.Fatalf("prompts pinned to %d pods, want 8: %v", len(prompts), prompts)
	}
	for pod, n := range prompts {
		if n != 2 {
			t.Errorf("pod %d has %d prompts, want 2", pod, n)
		}
	}
}

// A matrix whose only ratios are 1 (cache-aware alone, at the best hit
// rate of its cell) still draws: the log axis gets a range of its own.
func TestMatrixPlotOfOneRatioDraws(t *testing.T) {
	m := matrixRun{Cell: matrixCell{300, 1.5, 2}, Workload: "shared-prefix@4",
		Runs: map[string][]*routing.Result{"cache-aware": {result(0.5, 0.67)}}}
	p, err := matrixPlot([]matrixRun{m})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Save(200, 100, filepath.Join(t.TempDir(), "m.png")); err != nil {
		t.Fatalf("saving the plot: %v", err)
	}
}

// An opt-in part or policy runs only when named, while an empty list
// selects every other one.
func TestNamedIsOptIn(t *testing.T) {
	if named("", pinnedPairs) || !selected("", "cache-aware") {
		t.Error("an empty list must select the defaults and name nothing")
	}
	if !named("cache-aware,pinned-pairs", pinnedPairs) || named("cache-aware", pinnedPairs) {
		t.Error("named must hold exactly for an item the list names")
	}
}

package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/test/bench/routing"
)

// The routing matrix runs the cache-aware policy and its anchors on model
// servers with other constants than the routing benchmark's: every
// combination of a prefill cost, a KV cache size and a concurrency limit,
// on the shared-prefix and multi-turn workloads (and no-sharing, the
// do-no-harm check). It is time-scaled harder and sends fewer requests than
// the routing benchmark so that the 27 server shapes run in bounded time.
var (
	matrixPrefillUs    = []float64{300, 1000, 2000}
	matrixCachePrompts = []float64{1.5, 4, 10} // 2,000-token prompts one pod's KV cache holds
	matrixSeqs         = []int{2, 16, 64}
)

// Matrix workload shape: the setting, 300 requests over 16 shared
// 8,000-byte system prompts at 4 requests per simulated second. Each prompt's
// first request cannot hit any cache; with 300 requests those 16 are 5% of
// them, so the p90 measures routing, not the cold start every policy pays
// alike. Multi-turn has 12 turns per session for the same reason (16 cold
// first turns of 192), and no-sharing, all cold, needs fewer.
const (
	matrixRate             = 4.0
	matrixRequests         = 300
	matrixTurns            = 12
	matrixTurnSystem       = 2000 // bytes: the 12th turn still fits the smallest cache
	matrixNoSharingRequest = 120
	matrixPromptToks       = 2000
	matrixTimeScale        = 0.1
	// matrixCloseTimeScale is the time scale of the runs that decide a
	// close verdict. At matrixTimeScale a millisecond of the host's
	// scheduling is ten simulated ones, as much as a 0.3 ms-a-token cell's
	// p90 differs between the policies; at 0.2 it is half that.
	matrixCloseTimeScale = 0.2
)

// matrixNoSharing is the name of the matrix's no-sharing workload
// (routing.NoSharing at matrixRate).
var matrixNoSharing = fmt.Sprintf("no-sharing@%g", matrixRate)

// matrixCell is one server shape.
type matrixCell struct {
	PrefillUs float64
	Cache     float64
	Seqs      int
}

func (c matrixCell) String() string {
	return fmt.Sprintf("prefill %gms, cache %g prompts, %d seqs", c.PrefillUs/1000, c.Cache, c.Seqs)
}

// blocks is the cell's KV pool in 16-token blocks.
func (c matrixCell) blocks() int { return int(c.Cache * matrixPromptToks / 16) }

// matrixRun is every policy's results on one workload of one cell: a
// policy runs several times, since one collision of prefills moves a
// 300-request p90 by a prefill, and the verdicts compare medians.
type matrixRun struct {
	Cell     matrixCell
	Workload string
	// Runs holds every run of each policy at matrixTimeScale, by policy
	// label.
	Runs map[string][]*routing.Result
	// Close holds, where a close-call verdict lay within closeMargin after
	// the runs at matrixTimeScale, the runs of cache-aware and the policy
	// it is compared with at matrixCloseTimeScale; they decide that verdict.
	Close map[string][]*routing.Result
}

// p90 is the median over the policy's runs of the TTFT p90 counting every
// request sent (+Inf when most runs left a tenth unanswered), and the
// lowest and highest; ok is false when the policy did not run.
func (m matrixRun) p90(label string) (median, lo, hi float64, ok bool) {
	return p90Over(m.Runs[label])
}

// closeP90 is the median TTFT p90 that decides the policy's close-call
// verdict: over its runs at matrixCloseTimeScale where the cell ran them,
// else as p90.
func (m matrixRun) closeP90(label string) (median float64, ok bool) {
	if len(m.Close["cache-aware"]) > 0 {
		median, _, _, ok = p90Over(m.Close[label])
		return median, ok
	}
	median, _, _, ok = m.p90(label)
	return median, ok
}

// p90Over is the median TTFT p90 of rs and their lowest and highest.
func p90Over(rs []*routing.Result) (median, lo, hi float64, ok bool) {
	v := sortedOver(rs, func(r *routing.Result) float64 { return r.QuantileAll(0.9) })
	if len(v) == 0 {
		return 0, 0, 0, false
	}
	return v[len(v)/2], v[0], v[len(v)-1], true
}

// hit is the median over the policy's runs of its hit rate, 0 when it did
// not run.
func (m matrixRun) hit(label string) float64 {
	v := m.each(label, func(r *routing.Result) float64 { return r.HitRate })
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

// each returns f of every run of the policy, sorted.
func (m matrixRun) each(label string, f func(*routing.Result) float64) []float64 {
	return sortedOver(m.Runs[label], f)
}

// sortedOver returns f of every run of rs, sorted.
func sortedOver(rs []*routing.Result, f func(*routing.Result) float64) []float64 {
	v := make([]float64, 0, len(rs))
	for _, r := range rs {
		v = append(v, f(r))
	}
	slices.Sort(v)
	return v
}

// median returns the policy's run of median TTFT p90, nil when it did not
// run.
func (m matrixRun) median(label string) *routing.Result {
	rs := slices.Clone(m.Runs[label])
	if len(rs) == 0 {
		return nil
	}
	slices.SortFunc(rs, func(a, b *routing.Result) int { return cmp.Compare(a.QuantileAll(0.9), b.QuantileAll(0.9)) })
	return rs[len(rs)/2]
}

// matrixPolicies are the policies each cell runs.
var matrixPolicies = []routing.Policy{
	{Label: "round-robin", Config: policy.Config{Name: policy.RoundRobin}},
	{Label: "least-load", Config: policy.Config{Name: policy.LeastLoad}},
	{Label: "weighted-scorer", Config: policy.Config{Name: policy.WeightedScorer}},
	{Label: "cache-aware", Config: policy.Config{Name: policy.CacheAware}},
	{Label: pinnedPairs, Config: policy.Config{Name: policy.LeastLoad}},
}

// pinnedPairs is a fixed placement run only on shared-prefix and only when
// -policies names it: each system prompt pinned to one pod, two prompts a
// pod in the order they first appear, the picker only forwarding to the
// pod the gateway's subset hint names. Where a pod's cache holds 1.5
// prompts it is the placement that keeps the most of each prompt cached
// (a pod holds the prompt it served last and the head of its other one),
// so it shows what the cell allows a router at all.
const pinnedPairs = "pinned-pairs"

// pinPairs pins the workload's requests by their first message.
func pinPairs(w *routing.Workload) func(routing.Request) int {
	idx := map[string]int{}
	for _, r := range w.Requests {
		if _, ok := idx[r.Messages[0].Content]; !ok {
			idx[r.Messages[0].Content] = len(idx)
		}
	}
	return func(r routing.Request) int { return idx[r.Messages[0].Content] / 2 }
}

// matrixCells returns the cells to run: those listed, else all 27, or with
// quick the corners that differ most from the routing benchmark plus the
// issue's setting.
func matrixCells(quick bool, list string) ([]matrixCell, error) {
	if list != "" {
		return parseCells(list)
	}
	if quick {
		return []matrixCell{{1000, 1.5, 2}, {2000, 4, 16}, {300, 10, 64}, {2000, 1.5, 64}}, nil
	}
	var out []matrixCell
	for _, p := range matrixPrefillUs {
		for _, c := range matrixCachePrompts {
			for _, s := range matrixSeqs {
				out = append(out, matrixCell{p, c, s})
			}
		}
	}
	return out, nil
}

// parseCells reads cells written prefill-ms/cache-prompts/seqs, comma-separated.
func parseCells(list string) ([]matrixCell, error) {
	var out []matrixCell
	for _, f := range strings.Split(list, ",") {
		var ms, cache float64
		var seqs int
		if _, err := fmt.Sscanf(f, "%g/%g/%d", &ms, &cache, &seqs); err != nil || ms <= 0 || cache <= 0 || seqs <= 0 {
			return nil, fmt.Errorf("matrix cell %q: want prefill-ms/cache-prompts/seqs, e.g. 1/4/2", f)
		}
		out = append(out, matrixCell{ms * 1000, cache, seqs})
	}
	return out, nil
}

// keepWorkloads returns the workloads whose names start with one of the
// comma-separated prefixes, or all of them when there are none.
func keepWorkloads(ws []*routing.Workload, prefixes string) []*routing.Workload {
	if prefixes == "" {
		return ws
	}
	var keep []*routing.Workload
	for _, w := range ws {
		for _, p := range strings.Split(prefixes, ",") {
			if p != "" && strings.HasPrefix(w.Name, p) {
				keep = append(keep, w)
				break
			}
		}
	}
	return keep
}

func matrixSpec(c matrixCell, timeScale float64) routing.SimSpec {
	s := simSpec()
	s.FirstIP, s.Port = 71, 18200
	s.TimeScale = timeScale
	s.NumGPUBlocks, s.BlockSize, s.MaxNumSeqs = c.blocks(), 16, c.Seqs
	s.PrefillUsTok = c.PrefillUs
	return s
}

// matrixWorkloads are the workloads of every cell: a short prompt with no
// sharing checks that cache-aware does no harm.
func matrixWorkloads() []*routing.Workload {
	return []*routing.Workload{
		routing.SharedPrefix(routing.SharedPrefixSpec{Groups: 16, SystemBytes: 8000, QuestionByte: 200,
			Requests: matrixRequests, Rate: matrixRate, Seed: 18}),
		routing.MultiTurn(16, matrixTurns, matrixTurnSystem, 300, 200, 2*time.Second),
		routing.NoSharing(matrixNoSharingRequest, 2000, matrixRate, 19),
	}
}

// matrixBench runs the matrix.
func matrixBench(ctx context.Context, bins routing.Binaries, o options) ([]matrixRun, error) {
	cells, err := matrixCells(o.quick, o.cells)
	if err != nil {
		return nil, err
	}
	workdir, err := os.MkdirTemp("", "inferpick-matrix-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(workdir)
	runs := max(1, o.matrixRuns)
	if o.quick {
		runs = 1
	}
	closeRuns := max(0, o.matrixClose)
	if o.quick {
		closeRuns = 0
	}
	var out []matrixRun
	for _, cell := range cells {
		for _, w := range keepWorkloads(matrixWorkloads(), o.workloads) {
			run := matrixRun{Cell: cell, Workload: w.Name, Runs: map[string][]*routing.Result{}}
			// Round by round, so that a slow spell of the machine falls
			// on every policy alike.
			for round := range runs {
				if err := matrixRound(ctx, bins, cell, w, o, round > 0, run.Runs, matrixTimeScale, workdir); err != nil {
					return out, err
				}
			}
			if closeRuns > 0 && run.closeVerdict() {
				run.Close = map[string][]*routing.Result{}
				for range closeRuns {
					if err := matrixRound(ctx, bins, cell, w, o, true, run.Close, matrixCloseTimeScale, workdir); err != nil {
						return out, err
					}
				}
			}
			out = append(out, run)
		}
	}
	return out, nil
}

// matrixRound runs every selected policy of the cell's workload once at the
// time scale, or with again only those whose p90 enters a close verdict
// (closeCall), and adds each result to into under its policy's label.
func matrixRound(ctx context.Context, bins routing.Binaries, cell matrixCell, w *routing.Workload, o options, again bool,
	into map[string][]*routing.Result, timeScale float64, workdir string) error {
	for i := range matrixPolicies {
		p := &matrixPolicies[i]
		if p.Label == pinnedPairs && (!named(o.policies, pinnedPairs) || !strings.HasPrefix(w.Name, "shared-prefix")) {
			continue
		}
		if w.Name == matrixNoSharing && p.Label != "cache-aware" && p.Label != "least-load" ||
			!selected(o.policies, p.Label) || again && !closeCall(w.Name, p.Label) {
			continue
		}
		res, err := matrixOnce(ctx, bins, cell, w, p, timeScale, workdir)
		if err != nil {
			return err
		}
		into[p.Label] = append(into[p.Label], res)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// closeMargin is how near its bound cache-aware's median p90 must come,
// as a fraction of the bound, for a verdict to count as close: the
// run-to-run spread of a 120- to 300-request p90 at the matrix's time
// scale reaches about this much (BENCHMARKS.md shows each cell's lowest and
// highest run).
const closeMargin = 0.10

// closeVerdict reports whether cache-aware's median p90 lies within
// closeMargin of the bound a close-call target sets it, on either side:
// the weighted scorer's p90, or on no-sharing 1.05 × least-load's. Such a
// cell runs the rounds at matrixCloseTimeScale (-matrix-close-runs)
// whichever side it leans to, so that those decide it and not the first
// three.
func (m matrixRun) closeVerdict() bool {
	ca, _, _, ok := m.p90("cache-aware")
	if !ok || math.IsInf(ca, 1) {
		return false
	}
	bound, _, _, ok := m.p90(comparedWith(m.Workload))
	if m.Workload == matrixNoSharing {
		bound *= 1.05
	}
	if !ok || math.IsInf(bound, 1) || bound <= 0 {
		return false
	}
	return math.Abs(ca-bound) <= closeMargin*bound
}

// comparedWith is the policy whose p90 bounds cache-aware's in a close
// verdict on the workload: least-load on no-sharing, else the weighted
// scorer.
func comparedWith(workload string) string {
	if workload == matrixNoSharing {
		return "least-load"
	}
	return "weighted-scorer"
}

// closeCall reports whether the policy's p90 on the workload enters a
// verdict with a margin of the size of the run-to-run spread, and so runs
// every round: cache-aware, the weighted scorer it must match, and
// least-load on no-sharing. Round-robin is compared at half its p90 and
// least-load elsewhere not at all: one run each.
func closeCall(workload, label string) bool {
	return label == "cache-aware" || label == "weighted-scorer" || label == "least-load" && workload == matrixNoSharing
}

// matrixOnce runs one policy on one workload of one cell, on a cold cluster.
func matrixOnce(ctx context.Context, bins routing.Binaries, cell matrixCell, w *routing.Workload, p *routing.Policy, timeScale float64, workdir string) (*routing.Result, error) {
	if p.Label == pinnedPairs {
		pinned := *w
		pinned.Pin = pinPairs(w)
		w = &pinned
	}
	c, err := routing.Start(ctx, bins, matrixSpec(cell, timeScale), p.Config, workdir)
	if err != nil {
		return nil, fmt.Errorf("matrix %s / %s / %s: %w", cell, w.Name, p.Label, err)
	}
	res, err := routing.Run(ctx, c, w, deadline(w))
	c.Stop()
	if err != nil {
		return nil, fmt.Errorf("matrix %s / %s / %s: %w", cell, w.Name, p.Label, err)
	}
	res.Policy = p.Label
	log.Printf("matrix %-34s %-16s %-16s scale %g ok %d/%d hit %.2f (oracle %.2f) ttft p90 %.3fs",
		cell, w.Name, p.Label, timeScale, res.OK, res.Sent, res.HitRate, res.Oracle, res.Quantile(0.9))
	return res, nil
}

// oracle is the matrix's oracle for a run: the unbounded-cache oracle
// when the pool's caches together hold every distinct prompt, else the best
// hit rate any policy reached in the cell, since with fewer slots than
// prompts no router reaches the unbounded figure and the best achieved is
// the only reachable bound known.
func (m matrixRun) oracle() float64 {
	var some *routing.Result
	best := 0.0
	for label, rs := range m.Runs {
		some = rs[0]
		best = max(best, m.hit(label))
	}
	if some == nil {
		return 0
	}
	if m.Cell.Cache*8 >= 16 {
		return some.Oracle
	}
	return best
}

// matrixCheck is one cell's verdict against the matrix targets.
type matrixCheck struct {
	hitOK, vsWeighted, vsRR, noHarm bool
	known                           bool
}

func (m matrixRun) check() matrixCheck {
	p90, _, _, ok := m.p90("cache-aware")
	closeCA, _ := m.closeP90("cache-aware")
	if !ok {
		return matrixCheck{}
	}
	bound, okB := m.closeP90(comparedWith(m.Workload))
	if m.Workload == matrixNoSharing && okB {
		return matrixCheck{known: true, noHarm: closeCA <= 1.05*bound, hitOK: true, vsWeighted: true, vsRR: true}
	}
	rr, _, _, okR := m.p90("round-robin")
	if !okB || !okR {
		return matrixCheck{}
	}
	o, hit := m.oracle(), m.hit("cache-aware")
	return matrixCheck{known: true, noHarm: true,
		hitOK:      o == 0 || hit >= 0.95*o,
		vsWeighted: closeCA <= bound,
		vsRR:       p90 <= 0.5*rr,
	}
}

func (c matrixCheck) met() bool { return c.known && c.hitOK && c.vsWeighted && c.vsRR && c.noHarm }

// matrixVerdicts states the matrix targets over all cells.
func matrixVerdicts(runs []matrixRun) []verdict {
	if len(runs) == 0 {
		return nil
	}
	type tally struct{ met, all int }
	var hit, ws, rr, harm tally
	for _, m := range runs {
		c := m.check()
		if !c.known {
			continue
		}
		if m.Workload == matrixNoSharing {
			harm.all++
			if c.noHarm {
				harm.met++
			}
			continue
		}
		hit.all++
		ws.all++
		rr.all++
		if c.hitOK {
			hit.met++
		}
		if c.vsWeighted {
			ws.met++
		}
		if c.vsRR {
			rr.met++
		}
	}
	mk := func(target string, t tally) verdict {
		return verdict{target: target, known: t.all > 0, met: t.all > 0 && t.met == t.all,
			observed: fmt.Sprintf("%d of %d matrix runs", t.met, t.all)}
	}
	return []verdict{
		mk("matrix: cache-aware hit rate ≥ 0.95 × oracle in every cell", hit),
		mk("matrix: cache-aware TTFT p90 ≤ weighted-scorer's in every cell", ws),
		mk("matrix: cache-aware TTFT p90 ≤ 0.5 × round-robin's in every cell", rr),
		mk("matrix: cache-aware no-sharing TTFT p90 within 5% of least-load in every cell", harm),
	}
}

// p90Cell is the policy's p90 as the matrix table shows it: the median,
// and over several runs the lowest and highest in parentheses.
func (m matrixRun) p90Cell(label string) string {
	med, lo, hi, ok := m.p90(label)
	if !ok {
		return "–"
	}
	if r := m.median(label); math.IsInf(med, 1) {
		return fmt.Sprintf("never (%d of %d unanswered)", r.Sent-len(r.TTFT), r.Sent)
	}
	if len(m.Runs[label]) < 2 {
		return showP90(med)
	}
	return fmt.Sprintf("%s (%s–%s)", showP90(med), showP90(lo), showP90(hi))
}

// showP90 writes a p90 in seconds, or never for one not reached.
func showP90(p float64) string {
	if math.IsInf(p, 1) {
		return "never"
	}
	return fmt.Sprintf("%.3f", p)
}

// closeCell is the table's column of the runs at matrixCloseTimeScale:
// cache-aware's median p90 against that of the policy it is compared with,
// and each one's run count, or a dash where the cell ran none.
func (m matrixRun) closeCell() string {
	ca, okA := m.closeP90("cache-aware")
	o, okO := m.closeP90(comparedWith(m.Workload))
	if len(m.Close["cache-aware"]) == 0 || !okA || !okO {
		return "–"
	}
	runs := "runs"
	if len(m.Close["cache-aware"]) == 1 {
		runs = "run"
	}
	return fmt.Sprintf("%s vs %s (%d %s)", showP90(ca), showP90(o), len(m.Close["cache-aware"]), runs)
}

// matrixMarkdown writes the matrix section.
func matrixMarkdown(runs []matrixRun, plotDir string) string {
	if len(runs) == 0 {
		return ""
	}
	base, closeRuns := math.MaxInt, 0
	for _, m := range runs {
		if n := len(m.Runs["cache-aware"]); n > 0 {
			base = min(base, n)
		}
		closeRuns = max(closeRuns, len(m.Close["cache-aware"]))
	}
	closeText := ""
	if closeRuns > 0 {
		closeText = fmt.Sprintf(". Where after those cache-aware's median p90 lay within %.0f%% of its bound, on either side (the\n"+
			"weighted scorer's p90, on no-sharing 1.05 × least-load's), cache-aware and that policy ran %d times more each at time\n"+
			"scale %g, where the host's scheduling weighs half as much, and those runs decide that verdict (column **at %g**: their\n"+
			"median p90s, cache-aware's first)", 100*closeMargin, closeRuns, matrixCloseTimeScale, matrixCloseTimeScale)
	}
	out := "## Routing matrix: other model servers\n\n" +
		fmt.Sprintf("8 `vllm-sim` pods per cell (time scale %g, decode 20 ms/step, 8 output tokens), each cell a prefill cost per\n", matrixTimeScale) +
		"uncached token, a KV cache holding so many 2,000-token prompts (16-token blocks) and a concurrency limit\n" +
		"(`--max-num-seqs`). Workloads at 4 requests per simulated second: `shared-prefix@4` (" + fmt.Sprint(matrixRequests) + " requests, 16 system\n" +
		fmt.Sprintf("prompts of 8,000 bytes + a 200-byte question), `multi-turn` (16 sessions × %d turns over a %d-byte system prompt, 300-byte\n", matrixTurns, matrixTurnSystem) +
		"questions and 200-byte replies, think times of 1 to 3 s) and\n" +
		"`" + matrixNoSharing + "` (" + fmt.Sprint(matrixNoSharingRequest) + " unrelated 2,000-byte prompts; cache-aware and least-load only). Every run starts cold.\n" +
		fmt.Sprintf("Cache-aware, the weighted scorer and, on no-sharing, least-load run %d times in each cell and workload, round by\n", base) +
		"round (round-robin, compared at half its p90, and least-load elsewhere once)" + closeText + ". The table shows the\n" +
		"median hit rate and the median TTFT p90 (with the lowest and highest in parentheses), and the verdicts compare medians.\n" +
		"**oracle**: the unbounded-cache oracle where the pool's caches hold all 16 prompts (cache ≥ 2 prompts per pod), else the\n" +
		"best median hit rate any policy reached in the cell (no router reaches the unbounded figure with fewer cache slots than\n" +
		"prompts). Targets: hit ≥ 0.95 × oracle, TTFT p90 ≤ weighted-scorer's and ≤ 0.5 × round-robin's, no-sharing p90 ≤ 1.05 ×\n" +
		"least-load's. Times are simulated seconds, TTFT measured as in the routing benchmark (the time until the pod's\n" +
		"response headers as it was, the engine's time after it scaled); the p90 counts every request sent, one never answered\n" +
		"(the server refused it or it was still waiting at the deadline) as slower than any answer.\n\n" +
		"| cell | workload | runs | cache-aware hit | oracle | p90 cache-aware | weighted | round-robin | least-load | at " +
		fmt.Sprint(matrixCloseTimeScale) + " | verdict |\n" +
		"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
	for _, m := range runs {
		if len(m.Runs["cache-aware"]) == 0 {
			continue
		}
		c := m.check()
		mark := "met"
		if !c.met() {
			mark = "**missed**"
		}
		out += fmt.Sprintf("| %s | %s | %d | %.3f | %.3f | %s | %s | %s | %s | %s | %s |\n", m.Cell, m.Workload, len(m.Runs["cache-aware"]), m.hit("cache-aware"), m.oracle(),
			m.p90Cell("cache-aware"), m.p90Cell("weighted-scorer"), m.p90Cell("round-robin"), m.p90Cell("least-load"), m.closeCell(), mark)
	}
	out += fmt.Sprintf("\n![routing matrix](%s)\n\n", plotDir+"/"+plotMatrix)
	return out
}

// reproSpec is issue 18's setting: 8 pods of 272 blocks × 16 tokens (about
// two of the 2,000-token prompts), prefill 1 ms per uncached token and 2
// concurrent sequences per pod.
func reproSpec() routing.SimSpec {
	s := simSpec()
	s.FirstIP, s.Port = 81, 18300
	s.NumGPUBlocks, s.BlockSize, s.MaxNumSeqs, s.PrefillUsTok = 272, 16, 2, 1000
	return s
}

// reproWorkload is 300 streaming requests at 4 per second over 16 shared
// 8,000-byte system prompts, each with a distinct question.
func reproWorkload() *routing.Workload { return tightWorkload("tight-cache@4", 16, 18) }

// tightWorkload is 300 streaming requests at 4 per second over prompts
// shared 8,000-byte system prompts, each with a distinct question.
func tightWorkload(name string, prompts int, seed uint64) *routing.Workload {
	w := routing.SharedPrefix(routing.SharedPrefixSpec{Groups: prompts, SystemBytes: 8000, QuestionByte: 200,
		Requests: 300, Rate: 4, Seed: seed})
	w.Name = name
	return w
}

// reproBench runs the tight-cache setting under the matrix policies.
func reproBench(ctx context.Context, bins routing.Binaries, only string) ([]*routing.Result, error) {
	var pols []routing.Policy
	for i := range matrixPolicies {
		if selected(only, matrixPolicies[i].Label) {
			pols = append(pols, matrixPolicies[i])
		}
	}
	w := reproWorkload()
	return routing.Suite(ctx, bins, reproSpec(), pols, []*routing.Workload{w}, deadline)
}

// reproMarkdown writes the tight-cache section.
func reproMarkdown(res []*routing.Result) string {
	if len(res) == 0 {
		return ""
	}
	s := reproSpec()
	out := "## Tight cache, slow prefill\n\n" +
		fmt.Sprintf("8 `vllm-sim` pods of %d KV blocks × %d tokens (about two of the 2,000-token prompts each), prefill %g ms per\n", s.NumGPUBlocks, s.BlockSize, s.PrefillUsTok/1000) +
		fmt.Sprintf("uncached token, %d concurrent sequences, time scale %g; 300 streaming requests at 4 per simulated second over 16\n", s.MaxNumSeqs, s.TimeScale) +
		"shared 8,000-byte system prompts, each with its own question; the same sequence for each policy, cold caches.\n" +
		"TTFT as in the routing benchmark.\n\n" +
		"| policy | hit (server-side) | oracle | TTFT p50 | p90 | p99 | ok |\n|---|---:|---:|---:|---:|---:|---:|\n"
	for _, r := range res {
		out += fmt.Sprintf("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %d/%d |\n", r.Policy, r.HitRate, r.Oracle,
			r.Quantile(0.5), r.Quantile(0.9), r.Quantile(0.99), r.OK, r.Sent)
	}
	return out + "\n"
}

package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"strings"
	"time"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/test/bench/routing"
)

// replicaCounts are the active-active picker replica counts compared.
var replicaCounts = []int{1, 2, 3}

// replicaWorkloads names the workloads the replica runs use.
var replicaWorkloads = []string{"shared-prefix@18", "multi-turn", "one-system-prompt", "no-sharing"}

// replicaOnly, when set, names the replica workloads to run: then only
// their 1, 2 and 3 replica rows run.
var replicaOnly string

// kvEventsPort is where the replica runs' pods publish their KV-cache
// events: every replica learns from the servers where a prefix went,
// whoever routed it.
var kvEventsPort = 5557

// noEvents labels the cache-aware runs whose replicas do not read the pods'
// KV-cache events, for comparison.
const noEvents = "cache-aware, no KV events"

// whenScheduled labels the cache-aware runs whose pods publish a step's
// KV-cache events as it starts, as vLLM releases did that published from
// the scheduler's schedule(): the replicas learn where a prompt went while
// its first prefill runs.
const whenScheduled = "cache-aware, events when scheduled"

// rolling labels the cache-aware runs during which every replica is
// restarted in turn (SIGTERM, drained, started again, ready before the
// next), the gateway checking the replicas' readiness; rollingReplay is the
// same with the pods replaying the KV-event batches they keep
// (--kv-events-replay-port), so that a restarted replica learns where the
// fleet's prefixes already are.
const (
	rolling       = "cache-aware, rolling restart"
	rollingReplay = "cache-aware, rolling restart, replay"
)

// kvEventsReplayPort is where the pods of the rollingReplay runs replay
// their kept KV-event batches.
var kvEventsReplayPort = 5558

// replicaTimeScale is the replica runs' time scale: real time. Three
// picker processes, eight simulators, the gateway stand-in and the client
// share the host's cores; compressed time would multiply what that costs a
// request in transport (one replica's p90 from the client to the pod's first
// byte was 15 ms of wall time at 0.2, three replicas' 30 ms: 75 and 150 ms
// of simulated time) and bury the routing the runs compare.
const replicaTimeScale = 1

// replicaWarm is when, in simulated seconds from a run's start, its cold
// start is over: at 18 requests a second over 16 prompts, all but about 1%
// of them have been sent by then, and their first steps published.
const replicaWarm = 4.0

// replicaRuns is how many times each replica cell runs (at least once); the
// table and the verdicts take each figure's median over the runs.
var replicaRuns = 3

// replicaCell is the runs of one setting of the replica comparison.
type replicaCell struct {
	Replicas int
	Policy   string
	Workload string
	runs     []*routing.Result
	// restarts are the runs' rolling restarts, for the rolling cells.
	restarts []*routing.RestartReport
}

// stat returns the median over the cell's runs of f, and the lowest and
// highest.
func (c *replicaCell) stat(f func(*routing.Result) float64) (med, lo, hi float64) {
	v := sortedOver(c.runs, f)
	return median(v), v[0], v[len(v)-1]
}

func (c *replicaCell) hitRate() float64 {
	med, _, _ := c.stat(func(r *routing.Result) float64 { return r.HitRate })
	return med
}

// quantile is the median over the runs of their TTFT q-quantiles, and the
// lowest and highest.
func (c *replicaCell) quantile(q float64) (med, lo, hi float64) {
	return c.stat(func(r *routing.Result) float64 { return r.Quantile(q) })
}

// over is, as medians over the cell's runs, how many answered requests took
// longer than bound, how many were answered, and how many a TTFT p90 within
// bound leaves room for: those ranked above the p90.
func (c *replicaCell) over(bound float64) (over, n, room int) {
	med := func(f func(*routing.Result) float64) int {
		m, _, _ := c.stat(f)
		return int(math.Round(m))
	}
	over = med(func(r *routing.Result) float64 {
		k := 0
		for _, t := range r.TTFT {
			if t > bound {
				k++
			}
		}
		return float64(k)
	})
	n = med(func(r *routing.Result) float64 { return float64(len(r.TTFT)) })
	room = med(func(r *routing.Result) float64 { return float64(len(r.TTFT) - routing.QuantileRank(len(r.TTFT), 0.9)) })
	return over, n, room
}

// replicaReport is the replica section's results.
type replicaReport struct {
	cells []*replicaCell
	kill  *routing.KillReport
	// killRun is the run during which a replica was killed.
	killRun *routing.Result
}

// replicasBench runs the routing benchmark's cluster behind 1, 2 and 3
// active-active picker replicas (cache-aware), least-load behind 3 on
// no-sharing, and a 3-replica run that kills one replica half-way.
func replicasBench(ctx context.Context, bins routing.Binaries, all []*routing.Workload) (*replicaReport, error) {
	workdir, err := os.MkdirTemp("", "inferpick-replicas-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(workdir)
	byName := map[string]*routing.Workload{}
	for _, w := range all {
		name, _, _ := strings.Cut(w.Name, "@")
		if name == "shared-prefix" {
			name = w.Name
		}
		byName[name] = w
	}
	// Conversations under one system prompt, as an application's chats
	// are: a prefix every prompt shares must not decide where they go.
	byName["one-system-prompt"] = routing.OneSystemPrompt(turnSessions, sessionTurns, turnSystemBytes, 300, 200, time.Second)
	out := &replicaReport{}
	// start brings up a cold cluster behind n replicas.
	start := func(n int, pol routing.Policy, w *routing.Workload) (*routing.Cluster, error) {
		spec := simSpec()
		spec.Replicas = n
		spec.TimeScale = replicaTimeScale
		spec.KVEventsPort = kvEventsPort
		switch pol.Label {
		case noEvents:
			spec.KVEventsPort = 0
		case whenScheduled:
			spec.EventsWhenScheduled = true
		case rolling:
			spec.HealthCheck = true
		case rollingReplay:
			spec.HealthCheck = true
			spec.KVEventsReplayPort = kvEventsReplayPort
		}
		c, err := routing.Start(ctx, bins, spec, pol.Config, workdir)
		if err != nil {
			return nil, fmt.Errorf("%d replicas %s / %s: %w", n, pol.Label, w.Name, err)
		}
		return c, nil
	}
	kill := func(n int, pol routing.Policy, w *routing.Workload) error {
		c, err := start(n, pol, w)
		if err != nil {
			return err
		}
		defer c.Stop()
		res, rep, err := routing.RunKilling(ctx, c, w, deadline(w), lastArrival(w)/2, n-1)
		if err != nil {
			return err
		}
		out.kill, out.killRun = rep, res
		log.Printf("replicas %d, one killed: %s: on the killed one %d (%d failed), on the others %d (%d failed: %q), idle: %v",
			n, w.Name, rep.OnKilled, rep.FailedOnKilled, rep.OnOthers, rep.FailedOnOthers, rep.OthersFailures, rep.Idle)
		return nil
	}
	// runOnce runs w once behind n replicas; the rolling settings restart
	// every replica in turn meanwhile and report it.
	runOnce := func(n int, pol routing.Policy, w *routing.Workload) (*routing.Result, *routing.RestartReport, error) {
		c, err := start(n, pol, w)
		if err != nil {
			return nil, nil, err
		}
		defer c.Stop()
		var res *routing.Result
		var rep *routing.RestartReport
		if pol.Label == rolling || pol.Label == rollingReplay {
			res, rep, err = routing.RunRestarting(ctx, c, w, deadline(w), restartTimes(n, w))
		} else {
			res, err = routing.Run(ctx, c, w, deadline(w))
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%d replicas %s / %s: %w", n, pol.Label, w.Name, err)
		}
		res.Policy = pol.Label
		restarts := ""
		if rep != nil {
			restarts = fmt.Sprintf("; restarted at %v, away %v; failed %d, idle: %v", rep.At, rep.Took, rep.Failed, rep.Idle)
		}
		log.Printf("replicas %d %-12s %-18s ok %d/%d hit %.3f ttft p50 %.3fs p90 %.3fs%s",
			n, pol.Label, w.Name, res.OK, res.Sent, res.HitRate, res.Quantile(0.5), res.Quantile(0.9), restarts)
		return res, rep, nil
	}
	one := func(n int, pol routing.Policy, w *routing.Workload) error {
		cell := &replicaCell{Replicas: n, Policy: pol.Label, Workload: w.Name}
		for range replicaRuns {
			res, rep, err := runOnce(n, pol, w)
			if err != nil {
				return err
			}
			cell.runs = append(cell.runs, res)
			if rep != nil {
				cell.restarts = append(cell.restarts, rep)
			}
		}
		out.cells = append(out.cells, cell)
		return nil
	}
	ca := routing.Policy{Label: "cache-aware", Config: policy.Config{Name: policy.CacheAware}}
	ll := routing.Policy{Label: "least-load", Config: policy.Config{Name: policy.LeastLoad}}
	for _, n := range replicaCounts {
		for _, name := range replicaWorkloads {
			w := byName[name]
			if w == nil || !selected(replicaOnly, name) {
				continue
			}
			if err := one(n, ca, w); err != nil {
				return out, err
			}
		}
	}
	if replicaOnly != "" {
		return out, nil
	}
	if w := byName["no-sharing"]; w != nil {
		if err := one(3, ll, w); err != nil {
			return out, err
		}
	}
	if kvEventsPort != 0 {
		without := routing.Policy{Label: noEvents, Config: ca.Config}
		for _, name := range []string{"shared-prefix@18", "multi-turn"} {
			if w := byName[name]; w != nil {
				if err := one(3, without, w); err != nil {
					return out, err
				}
			}
		}
		if w := byName["shared-prefix@18"]; w != nil {
			early := routing.Policy{Label: whenScheduled, Config: ca.Config}
			for _, n := range []int{1, 3} {
				if err := one(n, early, w); err != nil {
					return out, err
				}
			}
		}
	}
	if w := byName["shared-prefix@18"]; w != nil {
		if err := kill(3, ca, w); err != nil {
			return out, err
		}
	}
	if kvEventsPort != 0 {
		for _, name := range []string{"shared-prefix@18", "multi-turn"} {
			w := byName[name]
			if w == nil {
				continue
			}
			for _, label := range []string{rolling, rollingReplay} {
				if err := one(3, routing.Policy{Label: label, Config: ca.Config}, w); err != nil {
					return out, err
				}
			}
		}
	}
	return out, nil
}

// restartTimes are when, in simulated time from a run's start, a rolling
// restart of n replicas stops each: spread evenly over w's arrivals (for
// sessions, over their turns' think times).
func restartTimes(n int, w *routing.Workload) []time.Duration {
	span := lastArrival(w)
	if w.Kind == routing.Sessions {
		turns := 0
		for _, s := range w.Sessions {
			turns = max(turns, len(s))
		}
		span = time.Duration(turns) * w.Think
	}
	at := make([]time.Duration, n)
	for i := range at {
		at[i] = span * time.Duration(i+1) / time.Duration(n+1)
	}
	return at
}

func lastArrival(w *routing.Workload) time.Duration {
	var last time.Duration
	for _, r := range w.Requests {
		last = max(last, r.At)
	}
	return last
}

func (rr *replicaReport) find(n int, pol, workload string) *replicaCell {
	for _, c := range rr.cells {
		if c.Replicas == n && c.Policy == pol && (c.Workload == workload || strings.HasPrefix(c.Workload, workload+"@")) {
			return c
		}
	}
	return nil
}

// replicaVerdicts checks the replica targets: with 3 replicas, hit rate ≥
// 0.95 × and TTFT p90 ≤ 1.1 × one replica's on shared-prefix@18 and
// multi-turn; no-sharing TTFT p90 within 5% of least-load (both behind 3
// replicas); after a replica kill, every request on the others succeeds and
// the survivors end idle.
func replicaVerdicts(rr *replicaReport) []verdict {
	if rr == nil {
		return nil
	}
	var out []verdict
	for _, name := range []string{"shared-prefix@18", "multi-turn"} {
		one, three := rr.find(1, "cache-aware", name), rr.find(3, "cache-aware", name)
		hit := verdict{target: fmt.Sprintf("3 replicas: %s hit rate ≥ 0.95 × one replica's", name)}
		ttft := verdict{target: fmt.Sprintf("3 replicas: %s TTFT p90 ≤ 1.1 × one replica's", name)}
		if one != nil && three != nil {
			h3, h1 := three.hitRate(), one.hitRate()
			hit.known, hit.met = true, h3 >= 0.95*h1
			hit.observed = fmt.Sprintf("%.3f vs %.3f (ratio %.2f)", h3, h1, h3/h1)
			p3, _, _ := three.quantile(0.9)
			p1, _, _ := one.quantile(0.9)
			ttft.known, ttft.met = true, p3 <= 1.1*p1
			over, n, room := three.over(1.1 * p1)
			alone, _, _ := one.over(1.1 * p1)
			ttft.observed = fmt.Sprintf("%.3f s vs %.3f s (ratio %.2f; %d of %d requests took over %.3f s, one picker's %d, the target allows %d)",
				p3, p1, p3/p1, over, n, 1.1*p1, alone, room)
			ttft.detail = rr.coldStart(name, one, three)
		}
		out = append(out, hit, ttft)
	}
	v := verdict{target: "3 replicas: cache-aware no-sharing TTFT p90 within 5% of least-load's"}
	if a, b := rr.find(3, "cache-aware", "no-sharing"), rr.find(3, "least-load", "no-sharing"); a != nil && b != nil {
		pa, _, _ := a.quantile(0.9)
		pb, _, _ := b.quantile(0.9)
		ratio := pa / pb
		v.known, v.met = true, ratio <= 1.05
		v.observed = fmt.Sprintf("%.3f s vs %.3f s (ratio %.2f)", pa, pb, ratio)
	}
	out = append(out, v)
	v = verdict{target: "replica killed mid-run: every request on the others succeeds, survivors end idle"}
	if k := rr.kill; k != nil {
		v.known = true
		v.met = k.FailedOnOthers == 0 && k.NoStream == 0 && k.Idle == nil && k.OnOthers > 0
		idle := "idle"
		if k.Idle != nil {
			idle = k.Idle.Error()
		}
		v.observed = fmt.Sprintf("others: %d/%d ok; killed: %d/%d ok; no stream: %d; survivors %s",
			k.OnOthers-k.FailedOnOthers, k.OnOthers, k.OnKilled-k.FailedOnKilled, k.OnKilled, k.NoStream, idle)
	}
	out = append(out, v)
	return out
}

// coldStart is what this run shows of a replica TTFT target's cold start:
// the p90 of the requests sent once the run is warm, and, where the run has
// them, the same runs with servers that publish a step's events as it
// starts.
func (rr *replicaReport) coldStart(name string, one, three *replicaCell) string {
	warm := func(c *replicaCell) float64 {
		m, _, _ := c.stat(func(r *routing.Result) float64 { return r.QuantileFrom(0.9, replicaWarm) })
		return m
	}
	w1, w3 := warm(one), warm(three)
	s := fmt.Sprintf("In this run, over the requests sent from %g s into the run on (column p90 from %g s), three "+
		"replicas' TTFT p90 is %.3f s against one picker's %.3f s (%.2f×).", replicaWarm, replicaWarm, w3, w1, w3/w1)
	if e1, e3 := rr.find(1, whenScheduled, name), rr.find(3, whenScheduled, name); e1 != nil && e3 != nil {
		p1, _, _ := e1.quantile(0.9)
		p3, _, _ := e3.quantile(0.9)
		s += fmt.Sprintf(" With servers that publish a step's events as it starts (rows \"%s\"), the whole run's is %.3f s "+
			"against %.3f s.", whenScheduled, p3, p1)
	}
	return s
}

// replicasMarkdown is the replica section of the report.
func replicasMarkdown(rr *replicaReport) string {
	if rr == nil || len(rr.cells) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Active-active replicas\n\n")
	w("The routing cluster behind 1, 2 and 3 picker replicas (`--ha-mode=active-active`), each with its own index and\n")
	w("guards and no shared state; the gateway stand-in spreads ext_proc streams round robin over them. Each run is cold,\n")
	w("in real time (time scale %g: see `replicaTimeScale` in `test/bench/replicas.go`), and each setting runs %s:\n", float64(replicaTimeScale), times(replicaRuns))
	w("the table and the verdicts show each figure's median over the runs, and the range of the runs' TTFT p90s.\n")
	if rr.find(1, "cache-aware", "one-system-prompt") != nil || rr.find(3, "cache-aware", "one-system-prompt") != nil {
		w("one-system-prompt is multi-turn's %d conversations under the one %d-byte system prompt they share, as an\n", turnSessions, turnSystemBytes)
		w("application's chats do, where multi-turn gives each its own: which pod holds a conversation is told by its turns alone.\n")
	}
	if kvEventsPort != 0 {
		w("The pods publish their KV-cache events and every replica subscribes (`--kv-events-port`), except in the rows\n")
		w("marked \"%s\". A pod publishes a step's events once the step has run, as current vLLM does,\n", noEvents)
		w("except in the rows marked \"%s\" (`vllm-sim --kv-events-when scheduled`), where it\n", whenScheduled)
		w("publishes them as the step starts, as vLLM releases did that published from the scheduler's `schedule()`.\n")
	}
	w("TTFT in seconds, measured by the client. **p90 from %g s**: the TTFT p90 of the requests sent from %g s into the\n", replicaWarm, replicaWarm)
	w("run on, once every prompt has been sent and its first prefill published (the median over the runs).\n\n")
	w("| replicas | policy | workload | ok/sent | hit rate | TTFT p50 | TTFT p90 | p90 range | TTFT p99 | p90 from %g s |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n", replicaWarm)
	for _, c := range rr.cells {
		ok, sent := 0, 0
		for _, r := range c.runs {
			ok, sent = ok+r.OK, sent+r.Sent
		}
		p50, _, _ := c.quantile(0.5)
		p90, lo, hi := c.quantile(0.9)
		p99, _, _ := c.quantile(0.99)
		warm, _, _ := c.stat(func(r *routing.Result) float64 { return r.QuantileFrom(0.9, replicaWarm) })
		w("| %d | %s | %s | %d/%d | %.3f | %.3f | %.3f | %.3f–%.3f | %.3f | %.3f |\n", c.Replicas, c.Policy, c.Workload, ok, sent,
			c.hitRate(), p50, p90, lo, hi, p99, warm)
	}
	if k := rr.kill; k != nil {
		w("\nOne of %d replicas killed (SIGKILL) half-way through the arrivals of %s: of the requests whose stream the\n", k.Replicas, rr.killRun.Workload)
		w("killed replica carried, %d of %d completed; of those on the others, %d of %d; %d found no replica.\n",
			k.OnKilled-k.FailedOnKilled, k.OnKilled, k.OnOthers-k.FailedOnOthers, k.OnOthers, k.NoStream)
		if k.Idle == nil {
			w("Afterwards every surviving replica counted no request in flight on any pod.\n")
		} else {
			w("Afterwards the survivors were not idle: %v.\n", k.Idle)
		}
	}
	rollingMarkdown(w, rr)
	w("\n")
	return b.String()
}

// rollingMarkdown describes the rolling-restart rows: how they were made
// and what the restarts cost in failed requests and counts left behind.
func rollingMarkdown(w func(string, ...any), rr *replicaReport) {
	var cells []*replicaCell
	for _, c := range rr.cells {
		if len(c.restarts) > 0 {
			cells = append(cells, c)
		}
	}
	if len(cells) == 0 {
		return
	}
	w("\nIn the rows marked \"%s\", every replica was stopped in turn while the run went on (SIGTERM: it turns\n", rolling)
	w("unready and drains its streams) and started again with the same flags, the next once it was ready again; the\n")
	w("gateway stand-in checks the replicas' readiness every 50 ms, as Envoy's health checker or a Service's endpoints\n")
	w("would. A restarted replica starts with an empty index. In the rows marked \"%s\", the pods also\n", rollingReplay)
	w("replay the KV-event batches they keep (vLLM's `replay_endpoint`; `--kv-events-replay-port`), so it starts\n")
	w("knowing what their caches hold; without the replay it learns a prefix only when a pod stores it again, and\n")
	w("sends the others to their homes.\n\n")
	for _, c := range cells {
		var at []string
		for i := range c.restarts[0].At {
			var v []float64
			for _, r := range c.restarts {
				if i < len(r.At) {
					v = append(v, r.At[i].Seconds())
				}
			}
			at = append(at, fmt.Sprintf("%.1f", median(v)))
		}
		var away time.Duration
		failed, sent, idle := 0, 0, true
		for i, r := range c.restarts {
			for _, t := range r.Took {
				away = max(away, t)
			}
			failed += r.Failed
			sent += c.runs[i].Sent
			idle = idle && r.Idle == nil
		}
		end := "every replica ended idle"
		if !idle {
			end = "**not every replica ended idle**"
		}
		w("- %s, %s: replicas stopped at %s s; each away for at most %.2f s (stop, drain, start, first scrapes);\n"+
			"  %d of %d requests failed; %s.\n", c.Policy, c.Workload, strings.Join(at, ", "), away.Seconds(), failed, sent, end)
	}
}

// times spells a count of runs.
func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

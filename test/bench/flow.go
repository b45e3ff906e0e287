package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/test/bench/routing"
)

// flowRun is one run of the priority-mix benchmark.
type flowRun struct {
	Label  string
	Result *routing.Result
}

// flowSpec is the priority-mix cluster: two pods of four sequences each,
// and a picker that counts a pod saturated at four requests in flight, so
// that an arrival rate above capacity meets a saturated pool. Answers are
// chat-length (flowMaxTokens), so a request's time on a pod is mostly
// decoding, as in interactive serving.
func flowSpec() routing.SimSpec {
	s := simSpec()
	s.Pods, s.FirstIP, s.Port, s.MaxNumSeqs = 2, 61, 18100, 4
	s.MaxTokens = flowMaxTokens
	s.ScaleTransport = true // the flow-control queue's wait comes before the headers
	return s
}

// Interactive and batch arrival rates (requests per simulated second), the
// output tokens of every request, and the places of each pod's four kept
// for interactive requests in the runs with flow control (the target run;
// a second run keeps one place, to show the trade-off).
const (
	flowInteractiveRate = 1.0
	flowBatchRate       = 10.0
	flowMaxTokens       = 64
	flowReserved        = 2
)

// flowControlArgs are the picker flags of a run with flow control that
// keeps reserved places of each pod for higher priorities.
func flowControlArgs(reserved int) []string {
	return []string{"--flow-control", "--objective-priorities", "interactive=10,batch=0",
		"--flow-control-max-wait", "3s", "--flow-control-reserved-slots", fmt.Sprint(reserved)}
}

// flowBench runs the priority-mix workload unloaded (interactive only),
// then overloaded without and with flow control.
func flowBench(ctx context.Context, bins routing.Binaries, quick bool) ([]flowRun, error) {
	window := 60 * time.Second
	if quick {
		window = 30 * time.Second
	}
	workdir, err := os.MkdirTemp("", "inferpick-flow-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(workdir)
	cfg := policy.Config{Name: policy.CacheAware, MaxInFlight: 4}
	fc := flowControlArgs(flowReserved)
	runs := []struct {
		label string
		args  []string
		w     *routing.Workload
	}{
		{"unloaded (interactive only)", fc, routing.PriorityMix(flowInteractiveRate, 0, window, 1000, 3)},
		{"overloaded, flow control off", nil, routing.PriorityMix(flowInteractiveRate, flowBatchRate, window, 1000, 3)},
		{"overloaded, flow control on, 1 place reserved", flowControlArgs(1), routing.PriorityMix(flowInteractiveRate, flowBatchRate, window, 1000, 3)},
		{"overloaded, flow control on", fc, routing.PriorityMix(flowInteractiveRate, flowBatchRate, window, 1000, 3)},
	}
	var out []flowRun
	for _, r := range runs {
		spec := flowSpec()
		spec.PickerArgs = r.args
		c, err := routing.Start(ctx, bins, spec, cfg, workdir)
		if err != nil {
			return nil, fmt.Errorf("priority-mix %s: %w", r.label, err)
		}
		res, err := routing.Run(ctx, c, r.w, deadline(r.w))
		c.Stop()
		if err != nil {
			return nil, fmt.Errorf("priority-mix %s: %w", r.label, err)
		}
		log.Printf("priority-mix %-30s interactive p90 %.3fs refused %d; batch ok %d refused %d",
			r.label, routing.QuantileOf(res.TTFTBy["interactive"], 0.9), res.RefusedBy["interactive"],
			len(res.TTFTBy["batch"]), res.RefusedBy["batch"])
		out = append(out, flowRun{Label: r.label, Result: res})
	}
	return out, nil
}

// lost is the requests of a run that got neither an answer nor a 429.
func lost(r *routing.Result) int {
	n := r.Sent - r.OK
	for _, refused := range r.RefusedBy {
		n -= refused
	}
	return n
}

// flowMarkdown is the priority-mix section of the report.
func flowMarkdown(runs []flowRun) string {
	if len(runs) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Priorities and flow control (`priority-mix`)\n\n")
	w("Two pods of four sequences (`maxInFlight: 4`), unrelated 1,000-byte prompts and %d-token answers:\n", flowMaxTokens)
	w("interactive requests (objective `interactive`, priority 10) at %g/s and batch requests (`batch`,\n", flowInteractiveRate)
	w("priority 0) at %g/s, about twice what the pool serves. Flow control on: `%s`\n", flowBatchRate, strings.Join(flowControlArgs(flowReserved), " "))
	w("(the wait bound is wall time: 15 simulated seconds at the time scale of 0.2). TTFT in simulated\n")
	w("seconds, measured by the client and wholly scaled, the wait in the picker's queue included; lost =\n")
	w("neither answered nor refused with 429. The run with one place reserved shows the trade-off: batch gets\n")
	w("more of the pool, and interactive requests then share the engine's steps with more batch sequences.\n\n")
	w("| run | band | sent | served | 429 | lost | TTFT p50 | TTFT p90 |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		for _, band := range []string{"interactive", "batch"} {
			served := len(r.Result.TTFTBy[band])
			sent := served + r.Result.RefusedBy[band]
			if sent == 0 {
				continue
			}
			lostHere := "–"
			if band == "interactive" {
				lostHere = fmt.Sprint(lost(r.Result))
			}
			w("| %s | %s | %d | %d | %d | %s | %.3f | %.3f |\n", r.Label, band, sent, served, r.Result.RefusedBy[band], lostHere,
				routing.QuantileOf(r.Result.TTFTBy[band], 0.5), routing.QuantileOf(r.Result.TTFTBy[band], 0.9))
		}
	}
	w("\n")
	return b.String()
}

// flowVerdict checks interactive TTFT p90 under overload with flow control
// against the unloaded pool, and that every request was answered or
// refused with 429.
func flowVerdict(runs []flowRun) verdict {
	v := verdict{target: "priority-mix: interactive TTFT p90 with flow control ≤ 1.2 × unloaded; nothing lost that was not answered 429"}
	var unloaded, on *routing.Result
	for _, r := range runs {
		switch {
		case strings.HasPrefix(r.Label, "unloaded"):
			unloaded = r.Result
		case strings.HasSuffix(r.Label, "flow control on"):
			on = r.Result
		}
	}
	if unloaded == nil || on == nil {
		return v
	}
	base := routing.QuantileOf(unloaded.TTFTBy["interactive"], 0.9)
	got := routing.QuantileOf(on.TTFTBy["interactive"], 0.9)
	if base > 0 {
		v.known, v.met = true, got <= 1.2*base && lost(on) == 0
		v.observed = fmt.Sprintf("%.3f s vs %.3f s unloaded (%.2f×); interactive refused %d; lost %d", got, base, got/base, on.RefusedBy["interactive"], lost(on))
	}
	return v
}

package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// podRow is one Pod in the report.
type podRow struct {
	Name    string
	Address string
	// Served counts the requests the gateway sent to this Pod, and Groups
	// splits them by prefix group.
	Served int
	Groups map[int]int
	// Sim is the simulator's own account.
	Sim simStats
	// Load, Prefill and Decode are inferpick's in-flight counts at the end.
	Load, Prefill, Decode int64
}

// report is the outcome of one demo run.
type report struct {
	Policy      string
	Groups      int
	Concurrency int
	Elapsed     time.Duration
	Requests    int
	Completed   int
	Aborted     int
	Failed      int
	// Errors holds the first few failures.
	Errors []string
	// TTFT holds the client's time to first token of every request that
	// got one.
	TTFT []time.Duration
	Pods []podRow
	// Idle is true when inferpick's load reached zero on every Pod.
	Idle bool
}

// maxErrorsShown bounds the failures a report lists.
const maxErrorsShown = 3

// summarize folds the client's outcomes into r.
func (r *report) summarize(outs []outcome) {
	r.Requests = len(outs)
	for _, o := range outs {
		switch {
		case o.Err != nil:
			r.Failed++
			if len(r.Errors) < maxErrorsShown {
				r.Errors = append(r.Errors, o.Err.Error())
			}
		case o.Aborted:
			r.Aborted++
		default:
			r.Completed++
		}
		if o.TTFT > 0 {
			r.TTFT = append(r.TTFT, o.TTFT)
		}
	}
	slices.Sort(r.TTFT)
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, or zero when it is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 || p <= 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// hitRate is cached over prompt tokens, as a percentage; "-" without any.
func hitRate(cached, prompt int64) string {
	if prompt == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(cached)/float64(prompt))
}

// maxGroupsShown bounds the prefix groups listed for one Pod.
const maxGroupsShown = 4

// groupList renders a Pod's prefix groups, busiest first: "g2:40 g5:39".
func groupList(groups map[int]int) string {
	type gc struct{ g, n int }
	list := make([]gc, 0, len(groups))
	for g, n := range groups {
		list = append(list, gc{g, n})
	}
	slices.SortFunc(list, func(a, b gc) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.g, b.g)) })
	parts := make([]string, 0, maxGroupsShown+1)
	for i, e := range list {
		if i == maxGroupsShown {
			parts = append(parts, fmt.Sprintf("+%d more", len(list)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("g%d:%d", e.g, e.n))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%dms", d.Round(time.Millisecond).Milliseconds()) }

// write prints the report.
func (r *report) write(w io.Writer) error {
	var b strings.Builder
	policy := cmp.Or(r.Policy, "inferpick's default")
	fmt.Fprintf(&b, "\n%d streaming chat requests (%d shared system prompts, %d in flight) through the gateway in %s, policy %s\n\n",
		r.Requests, r.Groups, r.Concurrency, r.Elapsed.Round(100*time.Millisecond), policy)

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pod\taddress\trequests\tprefix groups (group:requests)\tKV cache hit rate\taborted at pod\tload after run")
	var sum podRow
	for i := range r.Pods {
		p := &r.Pods[i]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\n", p.Name, p.Address, p.Served, groupList(p.Groups),
			hitRate(p.Sim.CachedTokens, p.Sim.PromptTokens), p.Sim.Aborted, p.Load)
		sum.Served += p.Served
		sum.Sim.CachedTokens += p.Sim.CachedTokens
		sum.Sim.PromptTokens += p.Sim.PromptTokens
		sum.Sim.Aborted += p.Sim.Aborted
		sum.Load += p.Load
	}
	fmt.Fprintf(tw, "all\t\t%d\t\t%s\t%d\t%d\n", sum.Served,
		hitRate(sum.Sim.CachedTokens, sum.Sim.PromptTokens), sum.Sim.Aborted, sum.Load)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("format table: %w", err)
	}

	fmt.Fprintf(&b, "\ntime to first token, seen by the client: p50 %s, p90 %s (%d requests)\n",
		ms(percentile(r.TTFT, 50)), ms(percentile(r.TTFT, 90)), len(r.TTFT))
	fmt.Fprintf(&b, "completed %d, aborted by the client mid-stream %d, failed %d\n", r.Completed, r.Aborted, r.Failed)
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "  failure: %s\n", e)
	}
	if r.Idle {
		b.WriteString("in-flight load held by inferpick after the run: 0 on every pod\n")
	} else {
		b.WriteString("\n!!! LOAD LEAK: inferpick still counts requests in flight after the run:\n")
		for i := range r.Pods {
			if p := &r.Pods[i]; p.Load != 0 {
				fmt.Fprintf(&b, "!!!   %s (%s): load %d (prefill %d, decode %d)\n", p.Name, p.Address, p.Load, p.Prefill, p.Decode)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Command bench runs inferpick's benchmarks and writes BENCHMARKS.md and
// the plots in docs/bench/: the Go micro-benchmarks of the hot path, an
// ext_proc load test against the inferpick binary, the scrape cost of 100
// endpoints, the controllers at 1,000 and 5,000 pods on a real API server
// (KUBEBUILDER_ASSETS, else hack/controlplane.sh), the pick's scaling with
// workers and body size, and the routing benchmark on a cluster of vLLM
// simulators.
//
//	go run ./test/bench              # everything, about an hour on 2 cores
//	go run ./test/bench -quick       # shorter runs, for a smoke check
//	go run ./test/bench -only scale  # one part (see -only)
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/inferpick/inferpick/test/bench/proc"
	"github.com/inferpick/inferpick/test/bench/routing"
)

func main() { os.Exit(execute()) }

// execute parses the flags and runs the benchmarks; it returns the exit code.
func execute() int {
	var o options
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "report to write")
	flag.StringVar(&o.plots, "plots", "docs/bench", "directory of the PNG plots")
	flag.BoolVar(&o.quick, "quick", false, "shorter runs")
	flag.IntVar(&o.count, "count", 5, "go test -count for the micro-benchmarks")
	flag.IntVar(&o.matrixRuns, "matrix-runs", 3, "runs of each policy in each matrix cell; the verdicts compare medians (-quick: 1)")
	flag.IntVar(&o.matrixClose, "matrix-close-runs", 7, "runs of cache-aware and the policy it is compared with, at time scale 0.2, that decide a matrix verdict still close after -matrix-runs (-quick: 0)")
	flag.StringVar(&o.only, "only", "", "comma-separated parts to run: go,load,scrape,scale,scaling,routing,replicas,flow,repro,offload,matrix (default all), or peers (opt-in: the load test through the upstream endpoint picker)")
	flag.StringVar(&o.policies, "policies", "", "comma-separated policy labels for the routing benchmark, the tight-cache and offloading runs and the matrix (default all)")
	flag.StringVar(&o.workloads, "workloads", "", "comma-separated workload name prefixes for the routing benchmark and the matrix, e.g. shared-prefix,multi-lora (default all)")
	flag.StringVar(&o.cells, "cells", "", "comma-separated matrix cells as prefill-ms/cache-prompts/seqs, e.g. 1/4/2,2/1.5/64 (default all)")
	flag.IntVar(&kvEventsPort, "replica-kv-events-port", kvEventsPort, "port of the pods' KV-cache events in the replica runs; 0 runs the replicas without them")
	flag.IntVar(&replicaRuns, "replica-runs", replicaRuns, "runs of each replica setting; the table and the verdicts take medians (-quick: 1)")
	flag.StringVar(&replicaOnly, "replica-workloads", "", "comma-separated replica workloads ("+strings.Join(replicaWorkloads, ",")+"): only the 1, 2 and 3 replica rows of these run (default every row)")
	flag.Parse()
	replicaRuns = max(replicaRuns, 1)
	if o.quick {
		replicaRuns = 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Print(err)
		return 1
	}
	return 0
}

type options struct {
	out, plots, only, policies, workloads, cells string
	quick                                        bool
	count, matrixRuns, matrixClose               int
}

func (o options) want(part string) bool { return selected(o.only, part) }

// selected reports whether the comma-separated list names item; an empty
// list selects everything.
func selected(list, item string) bool {
	return list == "" || strings.Contains(","+list+",", ","+item+",")
}

// named reports whether the comma-separated list names item itself: an
// opt-in part or policy runs only then, never by default.
func named(list, item string) bool { return list != "" && selected(list, item) }

func run(ctx context.Context, o options) error {
	started := time.Now()
	rep := &report{started: started, machine: describeMachine(), command: strings.Join(append([]string{"go run ./test/bench"}, os.Args[1:]...), " ")}
	bindir, err := os.MkdirTemp("", "inferpick-bench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bindir)
	log.Print("building inferpick and vllm-sim")
	picker, err := proc.Build(ctx, bindir, "./cmd/inferpick")
	if err != nil {
		return err
	}
	sim, err := proc.Build(ctx, bindir, "./cmd/vllm-sim")
	if err != nil {
		return err
	}
	// peers runs only when named: it builds the upstream picker.
	peers := named(o.only, "peers")
	var page string
	if o.want("load") || o.want("scrape") || peers {
		if page, err = simMetricsPage(sim); err != nil {
			return err
		}
	}
	if peers {
		log.Print("peers: the load test through the upstream endpoint picker")
		if rep.peers, err = peersBench(ctx, routing.Binaries{Sim: sim, Picker: picker}, page, o.quick); err != nil {
			return err
		}
		rep.peersOnly = o.only == "peers"
	}
	if o.want("go") {
		log.Print("go micro-benchmarks")
		if rep.gobench, err = goBenchmarks(ctx, o.count, o.quick); err != nil {
			return err
		}
	}
	if o.want("load") {
		log.Print("ext_proc load test")
		if rep.load, err = loadTest(ctx, picker, page, o.quick); err != nil {
			return err
		}
	}
	if o.want("scrape") {
		log.Print("scrape cost of 100 endpoints")
		if rep.scrape, err = scrapeCost(ctx, picker, page, o.quick); err != nil {
			return err
		}
	}
	if o.want("scale") {
		log.Print("controller at scale")
		if rep.scale, err = scaleBench(ctx, picker, o.quick); err != nil {
			return err
		}
	}
	if o.want("scaling") {
		log.Print("scaling table")
		if rep.scaling, err = scalingTable(ctx); err != nil {
			return err
		}
	}
	if o.want("routing") {
		log.Print("routing benchmark")
		rep.spec = simSpec()
		var pols []routing.Policy
		all := routing.Policies()
		for i := range all {
			if selected(o.policies, all[i].Label) {
				pols = append(pols, all[i])
			}
		}
		rep.workloads = keepWorkloads(workloads(o.quick), o.workloads)
		rep.routing, err = routing.Suite(ctx, routing.Binaries{Sim: sim, Picker: picker}, rep.spec, pols, rep.workloads, deadline)
		if err != nil {
			return err
		}
	}
	if o.want("replicas") {
		log.Print("replica benchmark")
		rep.spec = simSpec()
		if rep.replicas, err = replicasBench(ctx, routing.Binaries{Sim: sim, Picker: picker}, workloads(o.quick)); err != nil {
			return err
		}
	}
	if o.want("flow") {
		log.Print("priority-mix benchmark")
		if rep.flow, err = flowBench(ctx, routing.Binaries{Sim: sim, Picker: picker}, o.quick); err != nil {
			return err
		}
	}
	if o.want("repro") {
		log.Print("tight-cache benchmark")
		if rep.repro, err = reproBench(ctx, routing.Binaries{Sim: sim, Picker: picker}, o.policies); err != nil {
			return err
		}
	}
	if o.want("offload") {
		log.Print("offloading-tier benchmark")
		if rep.offload, err = offloadBench(ctx, routing.Binaries{Sim: sim, Picker: picker}, o.policies); err != nil {
			return err
		}
	}
	if o.want("matrix") {
		log.Print("routing matrix")
		if rep.matrix, err = matrixBench(ctx, routing.Binaries{Sim: sim, Picker: picker}, o); err != nil {
			return err
		}
	}
	rep.elapsed = time.Since(started)
	if err := os.MkdirAll(o.plots, 0o755); err != nil {
		return err
	}
	if err := rep.plot(o.plots); err != nil {
		return err
	}
	if err := os.WriteFile(o.out, []byte(rep.markdown(o.plots)), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	log.Printf("wrote %s and plots in %s after %v", o.out, o.plots, rep.elapsed.Round(time.Second))
	return nil
}

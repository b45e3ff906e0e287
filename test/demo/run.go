package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/inferpick/inferpick/picker/observe"
	"github.com/inferpick/inferpick/test/framework"
)

// errLoadLeak is returned when inferpick still counts requests in flight
// after every request has ended.
var errLoadLeak = errors.New("in-flight load did not return to 0")

// run starts the system, drives the workload through it, prints the report
// and stops everything. With c.Keep it stays up after the report until ctx
// ends. The report is returned even when the run found a problem.
func run(ctx context.Context, c config) (rep *report, err error) {
	plan, err := c.Workload.plan()
	if err != nil {
		return nil, err
	}
	s := newSystem(c)
	defer func() {
		fmt.Fprintln(c.Err, "stopping everything the demo started ...")
		if stopErr := s.stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stop: %w", stopErr))
		}
	}()
	if err := s.start(ctx); err != nil {
		return nil, err
	}

	fmt.Fprintf(c.Out, "==> sending %d requests through http://%s\n", len(plan), s.gwAddr)
	t := &tally{total: len(plan)}
	cl := &sender{
		http:    &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.Workload.Concurrency}},
		url:     "http://" + s.gwAddr + "/v1/chat/completions",
		timeout: c.Workload.Timeout,
		tally:   t,
	}
	bar := startProgress(ctx, c.Err, t, c.Quiet)
	start := time.Now()
	outs := cl.runAll(ctx, plan, c.Workload.Concurrency)
	elapsed := time.Since(start)
	bar.finish()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}

	rep = &report{Policy: c.Policy, Groups: c.Workload.Groups, Concurrency: c.Workload.Concurrency, Elapsed: elapsed}
	rep.summarize(outs)
	if err := s.collect(ctx, rep, plan); err != nil {
		return rep, err
	}
	if err := rep.write(c.Out); err != nil {
		return rep, err
	}
	if !rep.Idle {
		return rep, fmt.Errorf("%w: see %s and %s", errLoadLeak, workersURL(s.metricsAddr), s.logPath("inferpick"))
	}
	if !c.Keep {
		fmt.Fprintln(c.Out, "\nRun with KEEP=1 to keep the system up afterwards and poke at it.")
		return rep, nil
	}
	s.writePokes()
	<-ctx.Done()
	return rep, nil
}

// collect waits for inferpick's load to drain and gathers each Pod's
// numbers: requests served (from the gateway), the simulator's statistics
// and inferpick's in-flight counts.
func (s *system) collect(ctx context.Context, rep *report, plan []request) error {
	view, idleErr := framework.WaitIdle(ctx, workersURL(s.metricsAddr), s.c.LoadDeadline)
	rep.Idle = idleErr == nil
	if !rep.Idle && framework.Busy(view) == nil {
		return fmt.Errorf("read inferpick's workers: %w", idleErr)
	}
	byAddr := make(map[string]observe.WorkerView, len(view.Workers))
	for i := range view.Workers {
		byAddr[view.Workers[i].Address] = view.Workers[i]
	}
	served := s.servedWhenComplete(ctx, rep.Requests)
	rep.Pods = make([]podRow, len(s.simAddrs))
	for i, addr := range s.simAddrs {
		row := &rep.Pods[i]
		row.Name, row.Address, row.Groups = s.podNames[i], addr.String(), map[int]int{}
		if w, ok := byAddr[row.Address]; ok {
			row.Load, row.Prefill, row.Decode = w.Load, w.Prefill, w.Decode
		}
		if err := getJSON(ctx, s.hc, "http://"+row.Address+"/sim/stats", &row.Sim); err != nil {
			return err
		}
	}
	for id, ep := range served {
		if id >= len(plan) {
			continue
		}
		for i := range rep.Pods {
			if rep.Pods[i].Address == ep {
				rep.Pods[i].Served++
				rep.Pods[i].Groups[plan[id].Group]++
			}
		}
	}
	return nil
}

// servedWhenComplete returns the gateway's served endpoints once it has
// recorded n requests, or what it has after a short wait: a request's
// record is written as its handler returns, which may trail the client.
func (s *system) servedWhenComplete(ctx context.Context, n int) map[int]string {
	var served map[int]string
	_ = poll(ctx, 50*time.Millisecond, 5*time.Second, func(context.Context) (bool, error) {
		served = s.served.snapshot()
		return len(served) >= n, nil
	})
	return served
}

// writePokes prints the commands to look at the running system.
func (s *system) writePokes() {
	kubectl := filepath.Join(s.c.ControlPlaneDir, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		kubectl = "kubectl"
	}
	fmt.Fprintf(s.c.Out, `
The system stays up (KEEP=1). Try, from another terminal:

  # one chat completion through the gateway, streamed
  curl -sN http://%s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"%s","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"Hello"}]}'

  # the pool and its pods in the API server
  %s --kubeconfig %s get infpool,pods -n %s -o wide

  # what inferpick knows about each pod (load, prefill, decode, scraped metrics)
  curl -s http://%s/debug/workers

  # one model server's own statistics
  curl -s http://%s/sim/stats

Logs are in %s. Press Ctrl-C to stop everything.
`, s.gwAddr, s.c.Workload.Model, kubectl, s.cluster.kubeconfig, namespace, s.metricsAddr,
		s.simAddrs[0], filepath.Join(s.c.WorkDir, "logs"))
}

// requestID reads the plan ID the client put in a request's URI.
func requestID(uri string) (int, bool) {
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return 0, false
	}
	id, err := strconv.Atoi(u.Query().Get(requestParam))
	if err != nil || id < 0 {
		return 0, false
	}
	return id, true
}

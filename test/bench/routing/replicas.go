package routing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/inferpick/inferpick/test/gateway"
)

// recordLog keeps the gateway's record of every request of a run.
type recordLog struct {
	mu   sync.Mutex
	recs []gateway.Record
}

func (c *Cluster) record(r gateway.Record) {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	c.log.recs = append(c.log.recs, r)
}

// Records returns the gateway's records so far.
func (c *Cluster) Records() []gateway.Record {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	return append([]gateway.Record(nil), c.log.recs...)
}

// KillReplica sends SIGKILL to picker replica i: its streams break at once.
// It returns the replica's ext_proc address.
func (c *Cluster) KillReplica(i int) string {
	p := c.pickers[i]
	_ = syscall.Kill(p.p.Pid(), syscall.SIGKILL)
	p.p.Stop(5 * time.Second) // reaps it
	return p.grpcAddr
}

// WaitIdle polls every live replica's /debug/workers until each shows no
// request in flight on any pod, or timeout passes.
func (c *Cluster) WaitIdle(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		busy := c.busy(ctx)
		if len(busy) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not idle after %v: %s", timeout, strings.Join(busy, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// busy lists the live replicas' pods with requests in flight.
func (c *Cluster) busy(ctx context.Context) []string {
	var out []string
	for i, p := range c.pickers {
		if p.p.Exited() {
			continue
		}
		var v workersView
		if err := getJSON(ctx, &http.Client{Timeout: time.Second}, p.debug, &v); err != nil {
			out = append(out, fmt.Sprintf("replica %d: %v", i, err))
			continue
		}
		for _, w := range v.Workers {
			if w.Load != 0 {
				out = append(out, fmt.Sprintf("replica %d: %s has %d", i, w.Address, w.Load))
			}
		}
	}
	return out
}

// answered reports whether the request ended in a complete 200 answer. The
// client leaves as soon as it has read [DONE], which the gateway may see
// before its last write: that is not a failure.
func answered(r *gateway.Record) bool {
	return r.Status == http.StatusOK && !r.Reset && r.ProcessingError == nil
}

// KillReport is what a replica kill in the middle of a run cost.
type KillReport struct {
	Replicas int
	// Killed is the killed replica's ext_proc address.
	Killed string
	// OnKilled and OnOthers count the requests whose stream the killed
	// replica and the others took; the Failed fields count those that did
	// not end in a complete 200 answer.
	OnKilled, FailedOnKilled int
	OnOthers, FailedOnOthers int
	// NoStream counts requests no replica took (none reachable).
	NoStream int
	// Idle is nil when every surviving replica counted no request in flight
	// once the run was over.
	Idle error
	// OthersFailures describes the first failures on the other replicas.
	OthersFailures []string
}

// RunKilling drives w through c like Run and kills replica victim after
// at (simulated time from the start); then it waits for the survivors to
// be idle.
func RunKilling(ctx context.Context, c *Cluster, w *Workload, deadline, at time.Duration, victim int) (*Result, *KillReport, error) {
	if victim >= len(c.pickers) {
		return nil, nil, errors.New("no such replica")
	}
	rep := &KillReport{Replicas: len(c.pickers)}
	killed := make(chan struct{})
	timer := time.AfterFunc(time.Duration(float64(at)*c.spec.TimeScale), func() {
		rep.Killed = c.KillReplica(victim)
		close(killed)
	})
	res, err := Run(ctx, c, w, deadline)
	if !timer.Stop() {
		<-killed
	}
	if err != nil {
		return nil, nil, err
	}
	recs := c.Records()
	for i := range recs {
		r := &recs[i]
		ok := answered(r)
		switch r.Picker {
		case "":
			rep.NoStream++
		case rep.Killed:
			rep.OnKilled++
			if !ok {
				rep.FailedOnKilled++
			}
		default:
			rep.OnOthers++
			if !ok {
				rep.FailedOnOthers++
				if len(rep.OthersFailures) < 5 {
					rep.OthersFailures = append(rep.OthersFailures, fmt.Sprintf("%s: status %d reset %v client gone %v attempts %v: %v",
						r.Picker, r.Status, r.Reset, r.ClientGone, r.Attempts, r.ProcessingError))
				}
			}
		}
	}
	rep.Idle = c.WaitIdle(ctx, 30*time.Second)
	return res, rep, nil
}

// RestartReplica stops picker replica i gracefully (SIGTERM: it turns
// unready and drains its streams) and starts it again with the same flags
// and ports, returning once the new process has scraped every pod.
func (c *Cluster) RestartReplica(i int) error {
	p := c.pickers[i]
	p.p.Stop(restartGrace)
	return c.launch(p)
}

// restartGrace bounds a replica's drain before it is killed: the picker's
// own --drain-timeout (30 s) and a margin.
const restartGrace = 40 * time.Second

// RestartReport is what a rolling restart in the middle of a run cost.
type RestartReport struct {
	// At is when each replica was stopped and Took how long it was away
	// (stop, drain, start, first scrapes), in simulated time.
	At, Took []time.Duration
	// Failed counts the requests that did not end in a complete 200 answer.
	Failed int
	// Idle is nil when every replica counted no request in flight once the
	// run was over.
	Idle error
}

// RunRestarting drives w through c like Run and restarts replica i at at[i]
// (simulated time from the start), one after another: a replica is ready
// again before the next stops. Then it waits for every replica to be idle.
func RunRestarting(ctx context.Context, c *Cluster, w *Workload, deadline time.Duration, at []time.Duration) (*Result, *RestartReport, error) {
	if len(at) > len(c.pickers) {
		return nil, nil, errors.New("more restarts than replicas")
	}
	rep := &RestartReport{}
	scale := c.spec.TimeScale
	start := time.Now()
	restarted := make(chan error, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for i, t := range at {
			select {
			case <-rctx.Done(): // the run failed, or ctx ended: Run says so
				restarted <- nil
				return
			case <-time.After(time.Until(start.Add(time.Duration(float64(t) * scale)))):
			}
			stopped := time.Now()
			if err := c.RestartReplica(i); err != nil {
				restarted <- fmt.Errorf("restart of replica %d: %w", i, err)
				return
			}
			rep.At = append(rep.At, time.Duration(float64(stopped.Sub(start))/scale))
			rep.Took = append(rep.Took, time.Duration(float64(time.Since(stopped))/scale))
		}
		restarted <- nil
	}()
	res, err := Run(ctx, c, w, deadline)
	if err != nil {
		cancel()
		return nil, nil, errors.Join(err, <-restarted)
	}
	if err := <-restarted; err != nil {
		return nil, nil, err
	}
	recs := c.Records()
	for i := range recs {
		if !answered(&recs[i]) {
			rep.Failed++
		}
	}
	rep.Idle = c.WaitIdle(ctx, 30*time.Second)
	return res, rep, nil
}

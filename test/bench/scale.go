package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/inferpick/inferpick/test/bench/routing"
)

// scalePhase is what the picker spent on one phase of pod changes.
type scalePhase struct {
	Events  int64   // pod writes, each one watch event for the picker
	Seconds float64 // wall time until the picker had caught up
	CPU     float64 // picker CPU seconds, less its idle rate
}

func (p scalePhase) cpuPerEvent() float64 {
	if p.Events == 0 {
		return 0
	}
	return p.CPU / float64(p.Events)
}

// scaleResult is the controller-at-scale benchmark at one pool size.
type scaleResult struct {
	Pods    int
	Create  scalePhase // the pool filling up from empty
	Restart scalePhase // every pod replaced, in waves
	Steady  scalePhase // readiness flips at scaleChurnRate
	// HeapPerPod and RSSPerPod are the picker's live heap (after a GC) and
	// resident memory per pod, from the empty pool to the full one.
	HeapPerPod, RSSPerPod float64
	// PickQuiet and PickChurn are times from the end of a 1 KB request body
	// to the routing reply, without and during steady churn.
	PickQuiet, PickChurn latencies
}

// scaleChurnRate is the steady churn, in pod changes per second.
const scaleChurnRate = 50

// scaleBench starts a real API server and, for each pool size, a picker
// that serves one InferencePool, then fills the pool, restarts every pod
// and churns it, measuring the picker's CPU per pod event, its memory per
// pod and its pick latency.
func scaleBench(ctx context.Context, pickerBin string, quick bool) ([]scaleResult, error) {
	bc, err := routing.StartAPIServer(ctx)
	if err != nil {
		return nil, err
	}
	defer bc.Stop()
	sizes := []int{1000, 5000}
	if quick {
		sizes = sizes[:1]
	}
	var out []scaleResult
	for _, n := range sizes {
		r, err := scaleOnce(ctx, bc, pickerBin, n, quick)
		if err != nil {
			return nil, fmt.Errorf("scale %d pods: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func scaleOnce(ctx context.Context, bc *routing.APIServer, pickerBin string, n int, quick bool) (scaleResult, error) {
	c := bc.C
	res := scaleResult{Pods: n}
	ns, err := bc.Pool(ctx, "scale", scalePort)
	if err != nil {
		return res, err
	}
	pk, err := startClusterPicker(ctx, pickerBin, bc.Kubeconfig, ns)
	if err != nil {
		return res, err
	}
	defer pk.stop()
	fleet := newPodFleet(c, ns)
	heap0, rss0, err := pk.memory(ctx)
	if err != nil {
		return res, err
	}
	const writers = 16
	sentinel := 0
	// measure runs one phase of writes, then a sentinel pod, and waits
	// until the picker routes to the sentinel and its CPU settles.
	measure := func(name string, writes func() error) (scalePhase, error) {
		// The picker's own rate with nothing changing (health checks, timers,
		// the runtime over the pool as it now stands), taken off the phase.
		idle, err := pk.p.IdleRate(ctx, 2*time.Second)
		if err != nil {
			return scalePhase{}, err
		}
		e0, t0 := fleet.events.Load(), time.Now()
		c0, err := pk.p.CPUSeconds()
		if err != nil {
			return scalePhase{}, err
		}
		if err := writes(); err != nil {
			return scalePhase{}, err
		}
		sentinel++
		ip := podIP(250, sentinel)
		if err := fleet.start(ctx, fmt.Sprintf("sentinel-%d", sentinel), ip); err != nil {
			return scalePhase{}, err
		}
		if err := pk.waitRoutable(ctx, ip, 5*time.Minute); err != nil {
			return scalePhase{}, fmt.Errorf("%s: %w", name, err)
		}
		c1, secs := pk.settle(ctx), time.Since(t0).Seconds()
		ph := scalePhase{Events: fleet.events.Load() - e0, Seconds: secs, CPU: max(c1-c0-idle*secs, 0)}
		log.Printf("scale %d pods: %-8s %6d events in %5.1f s, picker CPU %.2f s (%s per event)",
			n, name, ph.Events, ph.Seconds, ph.CPU, human(ph.cpuPerEvent()*1e9))
		return ph, nil
	}

	if res.Create, err = measure("create", func() error {
		return parallel(ctx, n, writers, func(ctx context.Context, i int) error {
			return fleet.start(ctx, podName(1, i), podIP(1, i))
		})
	}); err != nil {
		return res, err
	}
	heap1, rss1, err := pk.memory(ctx)
	if err != nil {
		return res, err
	}
	res.HeapPerPod = float64(heap1-heap0) / float64(n)
	res.RSSPerPod = float64(rss1-rss0) / float64(n)

	pickFor := 10 * time.Second
	if quick {
		pickFor = 4 * time.Second
	}
	if res.PickQuiet, err = pk.pickLatencies(ctx, pickFor, nil); err != nil {
		return res, err
	}

	// A rolling restart: in waves of 5%, the replacements start and
	// become ready, then the pods they replace are deleted.
	wave := max(n/20, 1)
	if res.Restart, err = measure("restart", func() error {
		for from := 0; from < n; from += wave {
			to := min(from+wave, n)
			if err := parallel(ctx, to-from, writers, func(ctx context.Context, i int) error {
				return fleet.start(ctx, podName(2, from+i), podIP(2, from+i))
			}); err != nil {
				return err
			}
			if err := parallel(ctx, to-from, writers, func(ctx context.Context, i int) error {
				return fleet.stop(ctx, podName(1, from+i))
			}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return res, err
	}

	churnFor := 10 * time.Second
	if quick {
		churnFor = 5 * time.Second
	}
	rng := rand.New(rand.NewPCG(uint64(n), 17))
	// churn flips pods until stop ends, on a few writers so that one slow
	// write does not hold the rate back; each write runs to completion so
	// that the fleet knows what the API server holds.
	flips := make(chan struct{})
	churn := func(stop context.Context) error {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-stop.Done():
						return
					case <-flips:
					}
					if err := fleet.flip(ctx, rng); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		tick := time.NewTicker(time.Second / scaleChurnRate)
		defer tick.Stop()
		for stop.Err() == nil {
			select {
			case <-stop.Done():
			case <-tick.C:
				select {
				case flips <- struct{}{}:
				default: // every writer busy: the API server sets the pace
				}
			}
		}
		wg.Wait()
		select {
		case err := <-errs:
			return err
		default:
			return nil
		}
	}
	if res.Steady, err = measure("steady", func() error {
		cctx, cancel := context.WithTimeout(ctx, churnFor)
		defer cancel()
		return churn(cctx)
	}); err != nil {
		return res, err
	}
	if res.PickChurn, err = pk.pickLatencies(ctx, pickFor, churn); err != nil {
		return res, err
	}
	// The registry must hold exactly the ready pods.
	if err := pk.waitWorkers(ctx, fleet.ready(), time.Minute); err != nil {
		return res, err
	}
	return res, nil
}

// errNotRoutable is a pick that did not land on the wanted endpoint.
var errNotRoutable = errors.New("not routable yet")

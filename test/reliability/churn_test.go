package reliability

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferpick/inferpick/picker/observe"
	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// absence is a span during which the picker must not route to addr: from
// the moment its removal (or parking) was observed on /debug/workers until
// the API call that brought it back (zero: never). A request that arrived
// after from and whose destination came before until is in it.
type absence struct {
	addr     string
	from     time.Time
	until    time.Time
	stepName string
}

// TestPodChurnUnderLoad deletes, un-readies, relabels and re-creates pods
// (same IP, new UID) while requests stream. A removed worker leaves
// /debug/workers and the metrics together, an unready pod's worker stays in
// both, parked, no request is routed to either after that, in-flight guards
// release harmlessly, and a re-created pod starts at 0.
func TestPodChurnUnderLoad(t *testing.T) {
	c := sharedCluster(t)
	ns := c.Namespace(t)
	hosts := []string{"127.0.0.41", "127.0.0.42", "127.0.0.43", "127.0.0.44"}
	port := framework.FreePortT(t, hosts...)
	sims := make([]*sim, len(hosts))
	for i, h := range hosts {
		sims[i] = startSim(t, h, port, "--max-tokens-cap", "20000", "--num-gpu-blocks", "8192")
	}
	if err := c.Client.Create(t.Context(), framework.MakePool(ns, "pool").Ports(int32(port)).Obj()); err != nil {
		t.Fatal(err)
	}
	pods := make([]*corev1.Pod, len(hosts))
	for i, h := range hosts {
		pods[i] = c.ReadyPod(t, framework.MakePod(ns, "vllm-"+strconv.Itoa(i)).Obj(), h)
	}
	p := startClusterPicker(t, c, ns, "pool")
	p.WaitWorkers(t, len(hosts))
	g := startGateway(t, p.Addr())
	addr := func(i int) string { return net.JoinHostPort(hosts[i], strconv.Itoa(port)) }

	// Two long streams pinned to vllm-3, alive across its re-creation.
	longCtx, stopLongs := context.WithCancel(t.Context())
	defer stopLongs()
	var longs sync.WaitGroup
	for range 2 {
		longs.Go(func() {
			resp, err := g.Post(longCtx, "/v1/completions", completion("long stream", 20000, true), http.Header{gateway.SubsetHintHeader: {addr(3)}})
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	eventually(t, 30*time.Second, func() error { return loadOf(p, addr(3), 2) })

	// Background traffic with aborts, paused around the re-creation check.
	var paused atomic.Bool
	trafficCtx, stopTraffic := context.WithCancel(t.Context())
	var traffic sync.WaitGroup
	for w := range 8 {
		traffic.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for trafficCtx.Err() == nil {
				if paused.Load() {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				_ = stormRequest(trafficCtx, g, r, stormKind(r))
			}
		})
	}
	sampler := sampleLoads(p)

	var spans []*absence
	out := func(step string, i int, wait func(*testing.T, *picker, string) time.Time) *absence {
		t.Helper()
		a := &absence{addr: addr(i), stepName: step}
		a.from = wait(t, p, a.addr)
		spans = append(spans, a)
		// Let requests arrive while it is out of the picks.
		g.WaitRecords(t, len(g.Records())+40)
		return a
	}
	removed := func(step string, i int) *absence { t.Helper(); return out(step, i, waitGone) }
	ctx := t.Context()

	// 1. vllm-0 is deleted gracefully: terminating is gone.
	if err := c.Client.Delete(ctx, pods[0]); err != nil {
		t.Fatal(err)
	}
	gone0 := removed("delete vllm-0", 0)
	// 2. vllm-1 fails its readiness probe: its worker is parked, listed as
	// such with its series.
	c.SetStatus(t, pods[1], func(p *corev1.Pod) { framework.SetNotReady(p, hosts[1]) })
	gone1 := out("unready vllm-1", 1, waitParked)
	// 3. vllm-2 no longer matches the selector.
	pods[2].Labels = map[string]string{"app": "other"}
	if err := c.Client.Update(ctx, pods[2]); err != nil {
		t.Fatal(err)
	}
	gone2 := removed("relabel vllm-2", 2)
	// 4. vllm-3 is deleted at once and re-created with the same name and IP
	// while its two long streams still run on the server.
	oldUID := pods[3].UID
	if err := c.Client.Delete(ctx, pods[3], client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	gone3 := removed("delete vllm-3", 3)
	paused.Store(true)
	drainTraffic(t, p, addr(3))
	gone3.until = time.Now()
	pods[3] = c.ReadyPod(t, framework.MakePod(ns, "vllm-3").Obj(), hosts[3])
	w := waitWorker(t, p, addr(3))
	if w.UID == string(oldUID) || w.Load != 0 {
		t.Errorf("re-created vllm-3: uid %s (old %s), load %d; want a new worker at 0", w.UID, oldUID, w.Load)
	}
	if st, err := sims[3].Stats(); err != nil || st.Running < 2 {
		t.Errorf("the old streams should still run on vllm-3's server: %+v %v", st, err)
	}
	paused.Store(false)

	// 5. Everything comes back: a replacement for vllm-0 on its IP, vllm-1
	// ready again, vllm-2 relabelled back.
	gone0.until = time.Now()
	c.ReadyPod(t, framework.MakePod(ns, "vllm-0b").Obj(), hosts[0])
	gone1.until = time.Now()
	c.SetStatus(t, pods[1], func(p *corev1.Pod) { framework.SetReady(p, hosts[1]) })
	gone2.until = time.Now()
	pods[2].Labels = map[string]string{"app": "vllm"}
	if err := c.Client.Update(ctx, pods[2]); err != nil {
		t.Fatal(err)
	}
	p.WaitWorkers(t, len(hosts))

	stopTraffic()
	traffic.Wait()
	stopLongs()
	longs.Wait()
	settle := p.WaitIdle(t, 60*time.Second)
	sampler.Stop(t)
	t.Logf("loads back to 0 %s after the last request", settle.Round(time.Millisecond))
	checkReleases(t, p)
	eventually(t, 30*time.Second, func() error { return agree(p, sims, 0) })

	recs := g.Records()
	for _, a := range spans {
		for _, r := range recs {
			routed := r.Start.Add(r.Routed)
			if r.Start.After(a.from) && (a.until.IsZero() || routed.Before(a.until)) && slices.Contains(r.Endpoints, a.addr) {
				t.Errorf("after %q was observed (%s), a request arriving %s later was routed %s later to %v",
					a.stepName, a.from.Format(time.StampMicro), r.Start.Sub(a.from), routed.Sub(a.from), r.Endpoints)
			}
		}
	}
	t.Logf("%d requests checked against %d removals", len(recs), len(spans))
}

// waitGone polls until addr leaves /debug/workers and returns when that
// was observed. At that moment the metrics must have no series for it.
func waitGone(t *testing.T, p *picker, addr string) time.Time {
	t.Helper()
	var seen time.Time
	eventually(t, 30*time.Second, func() error {
		before := time.Now()
		v, err := p.Workers()
		if err != nil {
			return err
		}
		if slices.ContainsFunc(v.Workers, func(w observe.WorkerView) bool { return w.Address == addr }) {
			return fmt.Errorf("worker %s is still listed", addr)
		}
		seen = before
		return nil
	})
	pp, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if pp.Has("inferpick_worker_inflight_requests", "address", addr) {
		t.Errorf("worker %s left /debug/workers but still has metric series", addr)
	}
	return seen
}

// waitParked polls until the worker at addr is listed parked and returns
// when that was observed. At that moment the metrics must still have its
// series, saying it is parked.
func waitParked(t *testing.T, p *picker, addr string) time.Time {
	t.Helper()
	var seen time.Time
	eventually(t, 30*time.Second, func() error {
		before := time.Now()
		w, err := p.Worker(addr)
		if err != nil {
			return err
		}
		if !w.Parked || w.ParkedSince == nil {
			return fmt.Errorf("worker %s is listed, not parked", addr)
		}
		seen = before
		return nil
	})
	pp, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if !pp.Has("inferpick_worker_inflight_requests", "address", addr) || pp.Sum("inferpick_worker_parked", "address", addr) != 1 {
		t.Errorf("worker %s is listed parked, but its series are gone or do not say so", addr)
	}
	return seen
}

// waitWorker polls until addr is listed and returns its view.
func waitWorker(t *testing.T, p *picker, addr string) observe.WorkerView {
	t.Helper()
	var found observe.WorkerView
	eventually(t, 30*time.Second, func() error {
		var err error
		found, err = p.Worker(addr)
		return err
	})
	return found
}

// drainTraffic waits until the paused background traffic has no request
// in flight on any worker, so a worker appearing now must count 0.
func drainTraffic(t *testing.T, p *picker, except string) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		v, err := p.Workers()
		if err != nil {
			return err
		}
		for i := range v.Workers {
			w := &v.Workers[i]
			if w.Address != except && w.Load != 0 {
				return fmt.Errorf("worker %s still counts %d", w.Address, w.Load)
			}
		}
		return nil
	})
}

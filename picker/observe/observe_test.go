package observe

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

func twoWorkers(t *testing.T) (*registry.Registry, *registry.Worker, *registry.Worker) {
	t.Helper()
	reg := registry.New()
	a := registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "a", Port: 8000}, Namespace: "ns", Name: "pod-a", Address: netip.MustParseAddrPort("127.0.0.1:8000")})
	b := registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "b", Port: 8000}, Namespace: "ns", Name: "pod-b", Address: netip.MustParseAddrPort("127.0.0.2:8000")})
	return reg, a, b
}

func TestWorkersHandler(t *testing.T) {
	reg, a, _ := twoWorkers(t)
	registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "b", Port: 8001}, Namespace: "ns", Name: "pod-b", Address: netip.MustParseAddrPort("127.0.0.2:8001"), Rank: 1,
		Role: registry.ParseRole("prefill", true), Restarts: 2, Labels: registry.LabelsOf([]string{"example.com/gpu", "example.com/zone"}, map[string]string{"example.com/gpu": "h100", "other": "x"})})
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	a.SetMetrics(&registry.Metrics{Waiting: 3, Running: 2, KVUsage: 0.5, BlockSize: 16, NumGPUBlocks: 100, Engines: 1<<0 | 1<<1, Restarts: 1, Scraped: now.Add(-250 * time.Millisecond)})
	g := a.Admit()
	g.FirstToken()
	a.Admit()
	a.SetCalibration(&registry.Calibration{
		PrefillPerToken: 1500 * time.Microsecond, MeanPrefill: 90 * time.Millisecond, PrefillSource: "prefill histogram",
		DecodeSource: "none yet", BlocksPerLoadScale: 0.5, BytesPerToken: 4, CapacityBlocks: 80, CapacityScale: 0.8,
		CapacitySource: "cache_config_info, shrunk", HitRatio: 0.6, MaxSeqs: 2, MaxSeqsSource: "queue",
	})
	reg.MarkSynced()

	held := func(id uint32) (int, int) { // the KV-cache events' blocks: worker a's alone, 12 of them offloaded
		if id == a.ID() {
			return 42, 12
		}
		return 0, 0
	}
	srv := httptest.NewServer(WorkersHandler(reg, testingclock.NewFakePassiveClock(now), held))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var got WorkersView
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	waiting, running, kv, age, blocks, offloaded, none := 3, 2, 0.5, int64(250), 42, 12, 0
	want := WorkersView{Synced: true, Workers: []WorkerView{
		{Name: "pod-a", Namespace: "ns", UID: "a", Address: "127.0.0.1:8000", Engines: []int{0, 1}, Load: 2, Prefill: 1, Decode: 1,
			Waiting: &waiting, Running: &running, KVUsage: &kv, KVBlocks: 100, BlockSize: 16, MetricsAgeMS: &age, ServerRestarts: 1,
			Calibration: &CalibrationView{PrefillUSPerToken: 1500, MeanPrefillMS: 90, PrefillSource: "prefill histogram",
				DecodeSource: "none yet", BlocksPerLoadScale: 0.5, BytesPerToken: 4, CapacityBlocks: 80, CapacityScale: 0.8,
				CapacitySource: "cache_config_info, shrunk", HitRatio: 0.6, MaxSeqs: 2, MaxSeqsSource: "queue"},
			KVEventBlocks: &blocks, KVEventOffloadedBlocks: &offloaded},
		{Name: "pod-b", Namespace: "ns", UID: "b", Address: "127.0.0.2:8000", KVEventBlocks: &none, KVEventOffloadedBlocks: &none},
		{Name: "pod-b", Namespace: "ns", UID: "b", Address: "127.0.0.2:8001", Rank: 1, Role: "prefill", Restarts: 2, Labels: map[string]string{"example.com/gpu": "h100"}, KVEventBlocks: &none, KVEventOffloadedBlocks: &none},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("/debug/workers (-want +got):\n%s", diff)
	}
}

func TestWorkerCollectorDropsRemovedWorkers(t *testing.T) {
	reg, a, b := twoWorkers(t)
	a.Admit()
	pr := prometheus.NewRegistry()
	pr.MustRegister(NewWorkerCollector(reg))
	want := `
# HELP inferpick_worker_inflight_requests Requests in flight on a worker, counted by load guards, by phase.
# TYPE inferpick_worker_inflight_requests gauge
inferpick_worker_inflight_requests{address="127.0.0.1:8000",phase="decode",worker="pod-a"} 0
inferpick_worker_inflight_requests{address="127.0.0.1:8000",phase="prefill",worker="pod-a"} 1
inferpick_worker_inflight_requests{address="127.0.0.2:8000",phase="decode",worker="pod-b"} 0
inferpick_worker_inflight_requests{address="127.0.0.2:8000",phase="prefill",worker="pod-b"} 0
`
	if err := testutil.GatherAndCompare(pr, strings.NewReader(want), "inferpick_worker_inflight_requests"); err != nil {
		t.Error(err)
	}
	registrytest.Remove(reg, b.Endpoint().Key)
	if n := testutil.CollectAndCount(NewWorkerCollector(reg), "inferpick_worker_inflight_requests"); n != 2 {
		t.Errorf("%d in-flight series after removing a worker, want 2 (one worker × two phases)", n)
	}
}

type fakeIndex struct{ s prefix.Stats }

func (f fakeIndex) IndexStats() (prefix.Stats, bool) { return f.s, true }

func TestIndexCollector(t *testing.T) {
	c := NewIndexCollector(fakeIndex{prefix.Stats{Blocks: 10, Entries: 12, Capacity: 64, Lookups: 40, Hits: 30}})
	want := `
# HELP inferpick_prefix_index_blocks Distinct prompt blocks the prefix index holds.
# TYPE inferpick_prefix_index_blocks gauge
inferpick_prefix_index_blocks 10
# HELP inferpick_prefix_index_capacity_blocks Hard cap on the (block, worker) pairs the prefix index holds, whatever the model servers report.
# TYPE inferpick_prefix_index_capacity_blocks gauge
inferpick_prefix_index_capacity_blocks 64
# HELP inferpick_prefix_index_entries (block, worker) pairs the prefix index holds.
# TYPE inferpick_prefix_index_entries gauge
inferpick_prefix_index_entries 12
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"inferpick_prefix_index_blocks", "inferpick_prefix_index_capacity_blocks", "inferpick_prefix_index_entries"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(c); got != 5 {
		t.Errorf("%d series, want 5", got)
	}
}

// park makes w's pod unready while its server runs on: the registry parks
// the worker.
func park(reg *registry.Registry, w *registry.Worker) {
	ep := w.Endpoint()
	ep.Unready = true
	reg.Update([]registry.Endpoint{ep}, nil)
}

// A worker parked while its pod is unready is listed, saying so and since
// when, with the requests still running on it: an operator sees why the
// pod gets no traffic, and an idle check sees what it still counts. Ready
// again, it is listed as any other.
func TestWorkersHandlerShowsParkedWorkers(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	clk := testingclock.NewFakeClock(now.Add(-time.Minute))
	reg := registry.New(registry.WithClock(clk))
	a := registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "a", Port: 8000}, Namespace: "ns", Name: "pod-a", Address: netip.MustParseAddrPort("127.0.0.1:8000")})
	registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "b", Port: 8000}, Namespace: "ns", Name: "pod-b", Address: netip.MustParseAddrPort("127.0.0.2:8000")})
	g := a.Admit()
	g.FirstToken()
	park(reg, a)
	clk.SetTime(now)

	since := now.Add(-time.Minute)
	want := []WorkerView{
		{Name: "pod-a", Namespace: "ns", UID: "a", Address: "127.0.0.1:8000", Load: 1, Decode: 1, Parked: true, ParkedSince: &since},
		{Name: "pod-b", Namespace: "ns", UID: "b", Address: "127.0.0.2:8000"},
	}
	got := getWorkers(t, WorkersHandler(reg, clk, nil))
	if diff := cmp.Diff(want, got.Workers); diff != "" {
		t.Errorf("/debug/workers with pod-a unready (-want +got):\n%s", diff)
	}

	ep := a.Endpoint()
	ep.Unready = false
	reg.Update([]registry.Endpoint{ep}, nil)
	want[0].Parked, want[0].ParkedSince = false, nil
	if diff := cmp.Diff(want, getWorkers(t, WorkersHandler(reg, clk, nil)).Workers); diff != "" {
		t.Errorf("/debug/workers with pod-a Ready again (-want +got):\n%s", diff)
	}
}

// getWorkers serves one GET of /debug/workers through h.
func getWorkers(t *testing.T, h http.Handler) WorkersView {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/workers", http.NoBody))
	var v WorkersView
	if err := json.NewDecoder(rec.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// A parked worker keeps its series, inferpick_worker_parked telling it is
// out of the picks, and inferpick_workers counts the workers that may be
// picked; the series go once the worker is removed.
func TestWorkerCollectorKeepsParkedWorkers(t *testing.T) {
	reg, a, b := twoWorkers(t)
	a.Admit()
	park(reg, a)
	pr := prometheus.NewRegistry()
	pr.MustRegister(NewWorkerCollector(reg))
	want := `
# HELP inferpick_worker_inflight_requests Requests in flight on a worker, counted by load guards, by phase.
# TYPE inferpick_worker_inflight_requests gauge
inferpick_worker_inflight_requests{address="127.0.0.1:8000",phase="decode",worker="pod-a"} 0
inferpick_worker_inflight_requests{address="127.0.0.1:8000",phase="prefill",worker="pod-a"} 1
inferpick_worker_inflight_requests{address="127.0.0.2:8000",phase="decode",worker="pod-b"} 0
inferpick_worker_inflight_requests{address="127.0.0.2:8000",phase="prefill",worker="pod-b"} 0
# HELP inferpick_worker_parked 1 while the worker is parked: its pod is unready, its server runs on, and it gets no picks until the pod is Ready again.
# TYPE inferpick_worker_parked gauge
inferpick_worker_parked{address="127.0.0.1:8000",worker="pod-a"} 1
inferpick_worker_parked{address="127.0.0.2:8000",worker="pod-b"} 0
# HELP inferpick_workers Workers the picker may route to.
# TYPE inferpick_workers gauge
inferpick_workers 1
`
	if err := testutil.GatherAndCompare(pr, strings.NewReader(want),
		"inferpick_worker_inflight_requests", "inferpick_worker_parked", "inferpick_workers"); err != nil {
		t.Error(err)
	}
	registrytest.Remove(reg, a.Endpoint().Key)
	mfs, err := pr.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "address" && l.GetValue() != b.Address() {
					t.Errorf("%s keeps a series of the removed worker at %s", mf.GetName(), l.GetValue())
				}
			}
		}
	}
}

// An operator sees what the latency model learned of each worker and the
// least TPOT objective of the requests in flight there; a worker with
// neither shows neither.
func TestWorkersHandlerShowsLatency(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	clk := testingclock.NewFakeClock(now)
	reg := registry.New(registry.WithClock(clk))
	a := registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "a", Port: 8000}, Namespace: "ns", Name: "pod-a", Address: netip.MustParseAddrPort("127.0.0.1:8000")})
	registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "b", Port: 8000}, Namespace: "ns", Name: "pod-b", Address: netip.MustParseAddrPort("127.0.0.2:8000")})
	a.SetLatencyFactors(&registry.LatencyFactors{TTFT: 2.5, TTFTSamples: 12, TPOT: 0.8, TPOTSamples: 9})
	g := a.AdmitWith(40 * time.Millisecond)
	defer g.Release()
	ms := 40.0
	want := []WorkerView{
		{Name: "pod-a", Namespace: "ns", UID: "a", Address: "127.0.0.1:8000", Load: 1, Prefill: 1,
			Latency: &LatencyView{TTFTFactor: 2.5, TTFTSamples: 12, TPOTFactor: 0.8, TPOTSamples: 9}, LeastTPOTObjectiveMS: &ms},
		{Name: "pod-b", Namespace: "ns", UID: "b", Address: "127.0.0.2:8000"},
	}
	if diff := cmp.Diff(want, getWorkers(t, WorkersHandler(reg, clk, nil)).Workers); diff != "" {
		t.Errorf("/debug/workers (-want +got):\n%s", diff)
	}
}

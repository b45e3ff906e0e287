package epmetrics

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/inferpick/inferpick/picker/registry"
)

// The pool's series name a pod's endpoints as the upstream picker does,
// "<pod>-rank-<n>" by target port, so a pod serving on two ports (two
// data-parallel ranks) gives two series and the scrape stays valid.
func TestPoolCollector(t *testing.T) {
	reg := registry.New()
	reg.Replace([]registry.Endpoint{
		{Key: registry.Key{UID: "a", Port: 8000}, Namespace: "ns", Name: "pod-a", Address: netip.MustParseAddrPort("10.0.0.1:8000")},
		{Key: registry.Key{UID: "a", Port: 8001}, Namespace: "ns", Name: "pod-a", Address: netip.MustParseAddrPort("10.0.0.1:8001"), Rank: 1},
		{Key: registry.Key{UID: "b", Port: 8000}, Namespace: "ns", Name: "pod-b", Address: netip.MustParseAddrPort("10.0.0.2:8000")},
		{Key: registry.Key{UID: "c", Port: 8000}, Namespace: "ns", Name: "pod-c", Address: netip.MustParseAddrPort("10.0.0.3:8000")},
	})
	now := time.Now()
	for _, w := range reg.Workers() {
		switch w.Address() {
		case "10.0.0.1:8000":
			w.SetMetrics(&registry.Metrics{Waiting: 4, Running: 2, KVUsage: 0.5, Scraped: now})
		case "10.0.0.1:8001":
			w.SetMetrics(&registry.Metrics{Waiting: 2, Running: 1, KVUsage: 0.25, Scraped: now})
		case "10.0.0.2:8000":
			w.SetMetrics(&registry.Metrics{Waiting: 0, Running: 6, KVUsage: 0.75, Scraped: now})
		}
	}
	c := NewPoolCollector("pool", reg, func() (int, bool) { return 42, true }, time.Minute)
	want := `
# HELP inference_extension_prefix_indexer_size Entries (prompt blocks) held by the prefix index.
# TYPE inference_extension_prefix_indexer_size gauge
inference_extension_prefix_indexer_size 42
# HELP inference_pool_average_kv_cache_utilization Mean KV-cache usage of the pool's model servers.
# TYPE inference_pool_average_kv_cache_utilization gauge
inference_pool_average_kv_cache_utilization{name="pool"} 0.5
# HELP inference_pool_average_queue_size Mean requests waiting in the pool's model servers.
# TYPE inference_pool_average_queue_size gauge
inference_pool_average_queue_size{name="pool"} 2
# HELP inference_pool_average_running_requests Mean requests running in the pool's model servers.
# TYPE inference_pool_average_running_requests gauge
inference_pool_average_running_requests{name="pool"} 3
# HELP inference_pool_per_pod_queue_size Requests waiting in each model server of the pool.
# TYPE inference_pool_per_pod_queue_size gauge
inference_pool_per_pod_queue_size{model_server_pod="pod-a-rank-0",name="pool"} 4
inference_pool_per_pod_queue_size{model_server_pod="pod-a-rank-1",name="pool"} 2
inference_pool_per_pod_queue_size{model_server_pod="pod-b-rank-0",name="pool"} 0
# HELP inference_pool_ready_pods Ready pods (endpoints) of the pool.
# TYPE inference_pool_ready_pods gauge
inference_pool_ready_pods{name="pool"} 4
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// The averages count the workers whose model servers were scraped within
// the staleness bound, as the upstream picker's do: a server whose scrapes
// fail keeps its last figures, which must not weigh in the pool's averages.
// With none fresh the averages are absent rather than a 0 nobody measured;
// the ready pods are the pool's endpoints all the same.
func TestPoolCollectorCountsFreshMetricsOnly(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := testingclock.NewFakePassiveClock(now)
	reg := registry.New()
	reg.Replace([]registry.Endpoint{
		{Key: registry.Key{UID: "a", Port: 8000}, Namespace: "ns", Name: "pod-a", Address: netip.MustParseAddrPort("10.0.0.1:8000")},
		{Key: registry.Key{UID: "b", Port: 8000}, Namespace: "ns", Name: "pod-b", Address: netip.MustParseAddrPort("10.0.0.2:8000")},
		{Key: registry.Key{UID: "c", Port: 8000}, Namespace: "ns", Name: "pod-c", Address: netip.MustParseAddrPort("10.0.0.3:8000")},
	})
	for _, w := range reg.Workers() {
		switch w.Address() {
		case "10.0.0.1:8000":
			w.SetMetrics(&registry.Metrics{Waiting: 4, Running: 2, KVUsage: 0.5, Scraped: now.Add(-time.Second)})
		case "10.0.0.2:8000": // its scrapes have failed for a minute
			w.SetMetrics(&registry.Metrics{Waiting: 40, Running: 20, KVUsage: 1, Scraped: now.Add(-time.Minute)})
		}
	}
	c := NewPoolCollector("pool", reg, nil, 2*time.Second, WithClock(clk))
	names := []string{"inference_pool_average_kv_cache_utilization", "inference_pool_average_queue_size",
		"inference_pool_average_running_requests", "inference_pool_ready_pods"}
	want := `
# HELP inference_pool_average_kv_cache_utilization Mean KV-cache usage of the pool's model servers.
# TYPE inference_pool_average_kv_cache_utilization gauge
inference_pool_average_kv_cache_utilization{name="pool"} 0.5
# HELP inference_pool_average_queue_size Mean requests waiting in the pool's model servers.
# TYPE inference_pool_average_queue_size gauge
inference_pool_average_queue_size{name="pool"} 4
# HELP inference_pool_average_running_requests Mean requests running in the pool's model servers.
# TYPE inference_pool_average_running_requests gauge
inference_pool_average_running_requests{name="pool"} 2
# HELP inference_pool_ready_pods Ready pods (endpoints) of the pool.
# TYPE inference_pool_ready_pods gauge
inference_pool_ready_pods{name="pool"} 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Errorf("one fresh worker of three: %v", err)
	}

	clk.SetTime(now.Add(time.Hour))
	want = `
# HELP inference_pool_ready_pods Ready pods (endpoints) of the pool.
# TYPE inference_pool_ready_pods gauge
inference_pool_ready_pods{name="pool"} 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Errorf("no fresh worker: %v", err)
	}
}

// A static endpoint (--static-endpoints) is named by its address.
func TestPoolCollectorNamesStaticEndpointsByAddress(t *testing.T) {
	reg := registry.New()
	reg.Replace([]registry.Endpoint{{Key: registry.Key{UID: "static/127.0.0.1:8000", Port: 8000}, Name: "127.0.0.1:8000", Address: netip.MustParseAddrPort("127.0.0.1:8000")}})
	reg.Workers()[0].SetMetrics(&registry.Metrics{Waiting: 3, Scraped: time.Now()})
	want := `
# HELP inference_pool_per_pod_queue_size Requests waiting in each model server of the pool.
# TYPE inference_pool_per_pod_queue_size gauge
inference_pool_per_pod_queue_size{model_server_pod="127.0.0.1:8000",name="pool"} 3
`
	if err := testutil.CollectAndCompare(NewPoolCollector("pool", reg, nil, time.Minute), strings.NewReader(want), "inference_pool_per_pod_queue_size"); err != nil {
		t.Error(err)
	}
}

func TestModelsAreBounded(t *testing.T) {
	r := NewRecorder(nil)
	for i := range maxModels + 50 {
		r.Model(strings.Repeat("m", i+1)).Routed(0, 10)
	}
	if got := testutil.CollectAndCount(r.requests); got != maxModels+1 {
		t.Errorf("%d request_total series after %d models, want %d (the rest under %s)", got, maxModels+50, maxModels+1, otherModel)
	}
}

func TestPrefixMatches(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := NewPrefixMatches(reg)
	p.Observe(3, 4)
	p.Observe(0, 2)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]float64{}
	for _, f := range families {
		h := f.GetMetric()[0].GetHistogram()
		got[f.GetName()] = [2]float64{float64(h.GetSampleCount()), h.GetSampleSum()}
	}
	want := map[string][2]float64{
		"inference_extension_prefix_indexer_hit_ratio": {2, 0.75},
		"inference_extension_prefix_indexer_hit_bytes": {2, 192},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

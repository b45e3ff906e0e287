package policy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
	"github.com/inferpick/inferpick/picker/scrape"
)

// boastfulMetrics is a vLLM metrics page claiming 10^9 KV blocks of 16
// tokens: 10^9 × 16 × 4 / 64 = 10^9 prompt blocks of index capacity.
const boastfulMetrics = `# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.1
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="1000000000",num_cpu_blocks="0"} 1
`

// Model servers on loopback claim a billion KV blocks each; the real
// scraper reads their pages; thousands of unique prompts later the index
// still holds no more than its cap.
func TestIndexCapHoldsAgainstBoastfulModelServers(t *testing.T) {
	const maxBlocks = 4096
	reg := registry.New()
	scraper, err := scrape.New(nil, scrape.WithInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	reg.AddListener(scraper)
	for i := range 4 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = fmt.Fprint(w, boastfulMetrics)
		}))
		t.Cleanup(srv.Close)
		registrytest.Upsert(reg, registry.Endpoint{
			Key:     registry.Key{UID: fmt.Sprintf("pod-%d", i), Port: 8000},
			Name:    fmt.Sprintf("pod-%d", i),
			Address: netip.MustParseAddrPort(srv.Listener.Addr().String()),
		})
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- scraper.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("scraper: %v", err)
		}
	})
	ws := reg.Workers()
	waitFor(t, "every worker's scraped KV capacity", func() bool {
		for _, w := range ws {
			if m := w.Metrics(); m == nil || m.NumGPUBlocks != 1_000_000_000 {
				return false
			}
		}
		return true
	})
	if got := capacityBlocks(ws[0]); got != 1_000_000_000 {
		t.Fatalf("scraped capacity = %d prompt blocks, want 10^9", got)
	}

	p := build(t, Config{Index: IndexConfig{MaxBlocks: maxBlocks}}, reg, nil)
	ix := p.(*engine)
	peak := 0
	for i := range 2000 {
		// 2000 unique prompts of 16 blocks: 32,000 blocks, eight times the cap.
		if _, err := p.Pick(chat(fmt.Sprintf("tenant-%d", i), "q", 16*64, 0), ws, 1); err != nil {
			t.Fatalf("pick %d: %v", i, err)
		}
		st, _ := ix.IndexStats()
		if st.Entries > maxBlocks {
			t.Fatalf("after prompt %d the index holds %d entries, cap %d", i, st.Entries, maxBlocks)
		}
		peak = max(peak, st.Entries)
	}
	st, _ := ix.IndexStats()
	if st.Capacity != maxBlocks {
		t.Errorf("index capacity = %d, want %d", st.Capacity, maxBlocks)
	}
	if peak < maxBlocks/2 {
		t.Errorf("the index peaked at %d entries: the workload never came near the cap %d", peak, maxBlocks)
	}
}

// waitFor polls cond until it holds, failing the test after ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// A server may report any num_gpu_blocks up to the int range; a worker's
// capacity in prefix blocks is then the largest the index takes, whether or
// not it is calibrated yet, not a figure wrapped by an overflow (before: 1
// block, a negative figure, or 0 and the index's default).
func TestCapacityBlocksOfAnAbsurdKVCache(t *testing.T) {
	cases := map[string]struct {
		numGPUBlocks, blockSize int
		calibrated              bool
		want                    int
	}{
		"realistic":                          {numGPUBlocks: 272, blockSize: 16, want: 272},
		"realistic, calibrated":              {numGPUBlocks: 272, blockSize: 16, calibrated: true, want: 272},
		"9e18 blocks":                        {numGPUBlocks: 9_000_000_000_000_000_000, blockSize: 64, want: maxCapacityBlocks},
		"9e18 blocks, calibrated":            {numGPUBlocks: 9_000_000_000_000_000_000, blockSize: 64, calibrated: true, want: maxCapacityBlocks},
		"product a multiple of 2^64":         {numGPUBlocks: 1 << 58, blockSize: 64, want: maxCapacityBlocks},
		"beyond the int32 range":             {numGPUBlocks: 1 << 32, blockSize: 16, want: maxCapacityBlocks},
		"beyond the int32 range, calibrated": {numGPUBlocks: 1 << 32, blockSize: 16, calibrated: true, want: maxCapacityBlocks},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(1)
			w := ws[0]
			w.SetMetrics(&registry.Metrics{NumGPUBlocks: tc.numGPUBlocks, BlockSize: tc.blockSize, Scraped: epoch})
			if tc.calibrated {
				newCalibrator(reg).refresh(w)
				if w.Calibration() == nil {
					t.Fatal("no calibration")
				}
			}
			if got := capacityBlocks(w); got != tc.want {
				t.Errorf("capacityBlocks = %d, want %d", got, tc.want)
			}
		})
	}
}

package scrape

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

func mustPreset(t testing.TB, kind string) Names {
	t.Helper()
	n, err := Preset(kind)
	if err != nil {
		t.Fatalf("Preset(%q) error = %v", kind, err)
	}
	return n
}

func TestPresets(t *testing.T) {
	llama := vllmPage(pageSpec{models: []string{"meta-llama/Llama-3.1-8B-Instruct"}, waiting: 3, running: 12, kv: 0.625})
	cases := map[string]struct {
		kind    string
		names   *Names // instead of kind
		body    string
		want    Report
		wantErr error
	}{
		"auto reads vLLM": {
			kind: Auto, body: llama,
			want: Report{Waiting: 3, Running: 12, KVUsage: 0.625, BlockSize: 16, NumGPUBlocks: 27911, Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}, Counters: v1Counters(1), Engines: 1},
		},
		"auto reads SGLang with its page size and count": {
			kind: Auto, body: sglangCachePage,
			want: Report{Waiting: 2, Running: 5, KVUsage: 0.28, BlockSize: 1, NumGPUBlocks: 215880, Models: []string{"Qwen/Qwen2.5-7B-Instruct"}},
		},
		"auto does not read trtllm-serve": {kind: Auto, body: trtllmServePage, wantErr: ErrNoMetrics},
		"the empty kind is auto":          {kind: "", body: sglangPage, want: Report{Waiting: 2, Running: 5, KVUsage: 0.28, Models: []string{"Qwen/Qwen2.5-7B-Instruct"}}},
		"vllm reads the older usage name": {kind: VLLM, body: vllmV0Page, want: Report{Waiting: 7, Running: 4, KVUsage: 0.4375, BlockSize: 16, NumGPUBlocks: 7281, Models: []string{"meta-llama/Llama-2-7b-hf"}}},
		"vllm does not read SGLang":       {kind: VLLM, body: sglangPage, wantErr: ErrNoMetrics},
		"sglang does not read vLLM":       {kind: SGLang, body: llama, wantErr: ErrNoMetrics},
		"sglang reads SGLang":             {kind: SGLang, body: sglangCachePage, want: Report{Waiting: 2, Running: 5, KVUsage: 0.28, BlockSize: 1, NumGPUBlocks: 215880, Models: []string{"Qwen/Qwen2.5-7B-Instruct"}}},
		"trtllm reads trtllm-serve":       {kind: TRTLLM, body: trtllmServePage, want: Report{Waiting: 2, Running: 6, KVUsage: 0.3125, BlockSize: 32, NumGPUBlocks: 12850, Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}}},
		"trtllm reads Triton":             {kind: TRTLLM, body: tritonPage, want: Report{Waiting: 3, Running: 4, KVUsage: 0.25, BlockSize: 64, NumGPUBlocks: 8000}},
		"triton-tensorrt-llm is trtllm":   {kind: "triton-tensorrt-llm", body: tritonPage, want: Report{Waiting: 3, Running: 4, KVUsage: 0.25, BlockSize: 64, NumGPUBlocks: 8000}},
		"trtllm-serve is trtllm":          {kind: "trtllm-serve", body: trtllmServePage, want: Report{Waiting: 2, Running: 6, KVUsage: 0.3125, BlockSize: 32, NumGPUBlocks: 12850, Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}}},
		"trtllm does not read vLLM":       {kind: TRTLLM, body: llama, wantErr: ErrNoMetrics},
		"trtllm-serve's names win":        {kind: TRTLLM, body: trtllmServePage + tritonPage, want: Report{Waiting: 2, Running: 6, KVUsage: 0.3125, BlockSize: 32, NumGPUBlocks: 12850, Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}}},
		"Triton: two models are summed and maxed": {
			kind: TRTLLM,
			body: tritonPage + `nv_trt_llm_request_metrics{model="other",request_type="waiting",version="1"} 5
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="other",version="1"} 0.75
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="other",version="1"} 100
`,
			want: Report{Waiting: 3 + 5, Running: 4, KVUsage: 0.75, BlockSize: 64, NumGPUBlocks: 8000},
		},
		"a matcher on a label written with escapes": {
			kind: TRTLLM,
			body: `nv_trt_llm_request_metrics{model="a \"b\"",request_type="wait\\ing"} 9
nv_trt_llm_request_metrics{model="a \"b\"",request_type="waiting"} 2
`,
			want: Report{Waiting: 2},
		},
		"an info gauge wins over valued gauges": {
			names: &Names{
				CacheInfo: []CacheInfo{{Series: Series{Name: "x:cache_info"}, BlockSizeLabel: "bs", NumBlocksLabel: "nb"}},
				BlockSize: []Series{{Name: "x:block_size"}},
				NumBlocks: []Series{{Name: "x:blocks"}},
			},
			body: "x:block_size 8\nx:blocks 10\nx:cache_info{bs=\"16\",nb=\"20\"} 1\n",
			want: Report{BlockSize: 16, NumGPUBlocks: 20},
		},
		"one series feeds two fields": {
			names: &Names{Waiting: []Series{{Name: "q"}}, Running: []Series{{Name: "q"}}},
			body:  "q 4\n",
			want:  Report{Waiting: 4, Running: 4},
		},
		"a series with no matching sample is absent": {
			names:   &Names{Waiting: []Series{{Name: "q", Labels: []LabelMatch{{"kind", "waiting"}}}}},
			body:    "q{kind=\"running\"} 4\nq 3\n",
			wantErr: ErrNoMetrics,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var names Names
			if tc.names != nil {
				names = *tc.names
			} else {
				names = mustPreset(t, tc.kind)
			}
			s, err := NewSchema(names)
			if err != nil {
				t.Fatalf("NewSchema() error = %v", err)
			}
			got, err := s.Parse([]byte(tc.body))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Parse() error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPresetUnknown(t *testing.T) {
	_, err := Preset("tgi")
	if err == nil || !strings.Contains(err.Error(), `"tgi"`) || !strings.Contains(err.Error(), TRTLLM) {
		t.Errorf("Preset(tgi) error = %v, want one naming the kind and the known ones", err)
	}
}

func TestNewSchemaRejects(t *testing.T) {
	many := make([]Series, maxTargets+1)
	for i := range many {
		many[i] = Series{Name: "m"}
	}
	cases := map[string]struct {
		names   Names
		wantErr string
	}{
		"no name":         {names: Names{Waiting: []Series{{}}}, wantErr: "waiting series"},
		"bad name":        {names: Names{Running: []Series{{Name: "a-b"}}}, wantErr: "invalid metric name"},
		"bad label name":  {names: Names{KVUsage: []Series{{Name: "m", Labels: []LabelMatch{{"a:b", "x"}}}}}, wantErr: "invalid label name"},
		"too many series": {names: Names{LoRA: many}, wantErr: "more than 32 series"},
		"cache info":      {names: Names{CacheInfo: []CacheInfo{{}}}, wantErr: "cache info series"},
		"nothing to read": {names: Names{}, wantErr: "no series"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewSchema(tc.names)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewSchema() error = %v, want one mentioning %q", err, tc.wantErr)
			}
			if _, err := New(nil, WithNames(tc.names)); err == nil {
				t.Errorf("New(WithNames()) accepted the names NewSchema rejects")
			}
		})
	}
}

// TestScraperPresets scrapes each server's page through a real Scraper set
// up with its preset, and checks the metrics the worker ends up with.
func TestScraperPresets(t *testing.T) {
	cases := map[string]struct {
		kind string
		page string
		want registry.Metrics
	}{
		"vllm": {kind: VLLM, page: pageWith(3, 7, 0.25), want: registry.Metrics{Waiting: 3, Running: 7, KVUsage: 0.25, BlockSize: 16, NumGPUBlocks: 27911, Served: bases("m"),
			Counters: registry.Counters(v1Counters(1)), Engines: 1}},
		"sglang":       {kind: SGLang, page: sglangCachePage, want: registry.Metrics{Waiting: 2, Running: 5, KVUsage: 0.28, BlockSize: 1, NumGPUBlocks: 215880, Served: bases("Qwen/Qwen2.5-7B-Instruct")}},
		"trtllm-serve": {kind: TRTLLM, page: trtllmServePage, want: registry.Metrics{Waiting: 2, Running: 6, KVUsage: 0.3125, BlockSize: 32, NumGPUBlocks: 12850, Served: bases("meta-llama/Llama-3.1-8B-Instruct")}},
		"triton":       {kind: TRTLLM, page: tritonPage, want: registry.Metrics{Waiting: 3, Running: 4, KVUsage: 0.25, BlockSize: 64, NumGPUBlocks: 8000}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv := newModelServer(t, serve(tc.page))
			reg := registry.New()
			w := registrytest.Upsert(reg, endpoint("a", srv.addr()))
			clock := newFakeClock()
			startScraper(t, reg, WithClock(clock), WithNames(mustPreset(t, tc.kind)))

			eventually(t, "metrics on the worker", func() bool { return w.Metrics() != nil })
			want := tc.want
			want.Scraped = clock.Now()
			if diff := cmp.Diff(&want, w.Metrics()); diff != "" {
				t.Errorf("Metrics() (-want +got):\n%s", diff)
			}
		})
	}
}

package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/inferpick/inferpick/picker/scrape"
)

// Small pages of each model server, enough to tell the fields apart.
const (
	vllmMetrics = `vllm:num_requests_waiting{model_name="m"} 3
vllm:num_requests_running{model_name="m"} 5
vllm:kv_cache_usage_perc{model_name="m"} 0.5
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 1.75e+09
`
	sglangMetrics = `sglang:num_queue_reqs{model_name="m"} 2
sglang:num_running_reqs{model_name="m"} 4
sglang:token_usage{model_name="m"} 0.25
sglang:cache_config_info{num_pages="5000",page_size="1"} 1
`
	trtllmServeMetrics = `trtllm_num_requests_waiting{engine_type="trtllm",model_name="m"} 6
trtllm_num_requests_running{engine_type="trtllm",model_name="m"} 7
trtllm_kv_cache_utilization{engine_type="trtllm",model_name="m"} 0.125
trtllm_kv_cache_tokens_per_block{engine_type="trtllm",model_name="m"} 32
trtllm_kv_cache_max_blocks{engine_type="trtllm",model_name="m"} 12850
`
	tritonMetrics = `nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 8
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 9
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 11
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.75
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="tensorrt_llm",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 8000
`
)

// TestModelServerFlags builds the scraper's names from the flags, as the
// upstream charts render them among others, and reads a page with them.
func TestModelServerFlags(t *testing.T) {
	lora := &scrape.LoRAInfo{MaxLoRA: 2, Running: []string{"a"}}
	cases := map[string]struct {
		args    []string
		page    string
		want    scrape.Report
		wantErr string // in Complete's error
		noMatch bool   // the page holds none of the series
	}{
		"defaults read vLLM": {
			page: vllmMetrics,
			want: scrape.Report{Waiting: 3, Running: 5, KVUsage: 0.5, BlockSize: 16, NumGPUBlocks: 1000, LoRA: lora},
		},
		"defaults read SGLang": {
			page: sglangMetrics,
			want: scrape.Report{Waiting: 2, Running: 4, KVUsage: 0.25, BlockSize: 1, NumGPUBlocks: 5000},
		},
		"defaults do not read trtllm-serve": {page: trtllmServeMetrics, noMatch: true},
		"trtllm reads trtllm-serve": {
			args: []string{"--model-server-type", "trtllm"},
			page: trtllmServeMetrics,
			want: scrape.Report{Waiting: 6, Running: 7, KVUsage: 0.125, BlockSize: 32, NumGPUBlocks: 12850},
		},
		"trtllm reads Triton": {
			args: []string{"--model-server-type=trtllm"},
			page: tritonMetrics,
			want: scrape.Report{Waiting: 8, Running: 9, KVUsage: 0.75, BlockSize: 64, NumGPUBlocks: 8000},
		},
		"upstream engine name, quoted": {
			args: []string{`--model-server-type="triton-tensorrt-llm"`},
			page: tritonMetrics,
			want: scrape.Report{Waiting: 8, Running: 9, KVUsage: 0.75, BlockSize: 64, NumGPUBlocks: 8000},
		},
		"vllm does not read SGLang": {args: []string{"--model-server-type", "vllm"}, page: sglangMetrics, noMatch: true},
		"sglang chart flags, quoted as the chart renders them": {
			args: []string{`--total-queued-requests-metric="sglang:num_queue_reqs"`, `--total-running-requests-metric="sglang:num_running_reqs"`,
				`--kv-cache-usage-percentage-metric="sglang:token_usage"`, `--cache-info-metric="sglang:cache_config_info"`},
			page: sglangMetrics + vllmMetrics,
			want: scrape.Report{Waiting: 2, Running: 4, KVUsage: 0.25, BlockSize: 1, NumGPUBlocks: 5000, LoRA: lora},
		},
		"triton chart flags, with an empty LoRA metric": {
			args: []string{"--total-queued-requests-metric", "nv_trt_llm_request_metrics{request_type=waiting}",
				"--total-running-requests-metric", "nv_trt_llm_request_metrics{request_type=scheduled}",
				"--kv-cache-usage-percentage-metric", "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}",
				"--lora-info-metric", ""},
			page: tritonMetrics + vllmMetrics,
			// The cache info still comes from the default preset's names.
			want: scrape.Report{Waiting: 8, Running: 9, KVUsage: 0.75, BlockSize: 16, NumGPUBlocks: 1000},
		},
		"a flag overrides its preset's series": {
			args: []string{"--model-server-type", "trtllm", "--total-running-requests-metric", `nv_trt_llm_request_metrics{request_type="active"}`},
			page: tritonMetrics,
			want: scrape.Report{Waiting: 8, Running: 11, KVUsage: 0.75, BlockSize: 64, NumGPUBlocks: 8000},
		},
		"an empty metric reads nothing": {
			args: []string{"--model-server-type", "vllm", "--kv-cache-usage-percentage-metric", `""`},
			page: vllmMetrics,
			want: scrape.Report{Waiting: 3, Running: 5, BlockSize: 16, NumGPUBlocks: 1000, LoRA: lora},
		},
		"a custom cache info metric reads vLLM's labels": {
			args: []string{"--cache-info-metric", "my_cache_info"},
			page: "my_cache_info{block_size=\"8\",num_gpu_blocks=\"99\"} 1\n",
			want: scrape.Report{BlockSize: 8, NumGPUBlocks: 99},
		},
		"unknown server":  {args: []string{"--model-server-type", "tgi"}, wantErr: `--model-server-type: unknown model server "tgi"`},
		"regexp matcher":  {args: []string{"--total-queued-requests-metric", `q{a=~"x"}`}, wantErr: "--total-queued-requests-metric: metric spec"},
		"bad metric name": {args: []string{"--kv-cache-usage-percentage-metric", "kv usage"}, wantErr: "--kv-cache-usage-percentage-metric"},
		"unclosed braces": {args: []string{"--cache-info-metric", "info{a=b"}, wantErr: "no closing brace"},
		"bad lora metric": {args: []string{"--lora-info-metric", "{x}"}, wantErr: "--lora-info-metric"},
		"nothing left to read": {
			args: []string{"--model-server-type", "sglang", "--total-queued-requests-metric", "", "--total-running-requests-metric", "",
				"--kv-cache-usage-percentage-metric", "", "--cache-info-metric", ""},
			wantErr: "no series to read",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := parse(t, append([]string{"--static-endpoints", "127.0.0.1:1"}, tc.args...)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(o.Warnings) != 0 {
				t.Errorf("Warnings = %+v, want none", o.Warnings)
			}
			s, err := scrape.NewSchema(o.ModelServer.names)
			if err != nil {
				t.Fatalf("NewSchema() error = %v", err)
			}
			got, err := s.Parse([]byte(tc.page))
			if tc.noMatch {
				if !errors.Is(err, scrape.ErrNoMetrics) {
					t.Errorf("Parse() = %+v, %v; want ErrNoMetrics", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse() error = %v", err)
			}
			// Which series the flags select is the point; the model names
			// the selected series carry are the scrape package's tests.
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(scrape.Report{}, "Models")); diff != "" {
				t.Errorf("Parse() (-want +got):\n%s", diff)
			}
		})
	}
}

package scrape

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const sglangPage = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="Qwen/Qwen2.5-7B-Instruct"} 5.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{model_name="Qwen/Qwen2.5-7B-Instruct"} 12034.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="Qwen/Qwen2.5-7B-Instruct"} 0.28
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="Qwen/Qwen2.5-7B-Instruct"} 2.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="Qwen/Qwen2.5-7B-Instruct"} 3.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="Qwen/Qwen2.5-7B-Instruct"} 9.0
`

// vllmV0Page is the shape of a vLLM v0.x page: no engine label and the
// older gpu_cache_usage_perc name.
const vllmV0Page = `# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="False",gpu_memory_utilization="0.9",num_cpu_blocks="2048",num_gpu_blocks="7281",num_gpu_blocks_override="None",sliding_window="None",swap_space_bytes="4294967296"} 1.0
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-2-7b-hf"} 4.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="meta-llama/Llama-2-7b-hf"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="meta-llama/Llama-2-7b-hf"} 7.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="meta-llama/Llama-2-7b-hf"} 0.4375
# HELP vllm:cpu_cache_usage_perc CPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:cpu_cache_usage_perc gauge
vllm:cpu_cache_usage_perc{model_name="meta-llama/Llama-2-7b-hf"} 0.0
`

func TestParse(t *testing.T) {
	cases := map[string]struct {
		body    string
		want    Report
		wantErr error
	}{
		"vllm v1 page": {
			body: vllmPage(pageSpec{models: []string{"meta-llama/Llama-3.1-8B-Instruct"}, waiting: 3, running: 12, kv: 0.625}),
			want: Report{Waiting: 3, Running: 12, KVUsage: 0.625, BlockSize: 16, NumGPUBlocks: 27911, Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}, Counters: v1Counters(1), Engines: 1},
		},
		"vllm v1 page with two models is summed and maxed": {
			body: vllmPage(pageSpec{models: []string{"base", "base-lora"}, waiting: 2, running: 5, kv: 0.5}),
			// The page generator gives the n-th model n+1 times the counts
			// and a usage of kv/(n+1).
			want: Report{Waiting: 2 + 4, Running: 5 + 10, KVUsage: 0.5, BlockSize: 16, NumGPUBlocks: 27911, Models: []string{"base", "base-lora"}, Counters: v1Counters(2), Engines: 1},
		},
		"vllm v0 page with the older cache usage name": {
			body: vllmV0Page,
			want: Report{Waiting: 7, Running: 4, KVUsage: 0.4375, BlockSize: 16, NumGPUBlocks: 7281, Models: []string{"meta-llama/Llama-2-7b-hf"}},
		},
		"calibration counters: the V1 names win, older ones are read alone, NaN and negatives ignored": {
			body: "vllm:prefix_cache_hits_total 10\nvllm:gpu_prefix_cache_hits_total 99\n" +
				"vllm:gpu_prefix_cache_queries_total 40\nvllm:prompt_tokens_total{model_name=\"a\"} 30\n" +
				"vllm:prompt_tokens_total{model_name=\"b\"} NaN\nvllm:request_prefill_time_seconds_sum -3\n" +
				"vllm:request_prefill_time_seconds_count 2\nvllm:time_per_output_token_seconds_sum 0.5\n" +
				"vllm:time_per_output_token_seconds_count 25\n",
			want: Report{Models: []string{"a", "b"}, Counters: Counters{PromptTokens: 30, PrefixQueries: 40, PrefixHits: 10, Prefills: 2,
				DecodeSeconds: 0.5, DecodeTokens: 25}},
		},
		"data-parallel engines behind one port: running summed, engines named": {
			body: `vllm:num_requests_running{engine="0",model_name="m"} 2
vllm:num_requests_running{engine="1",model_name="m"} 3
vllm:num_requests_running{engine="3",model_name="m"} 0
vllm:num_requests_waiting{engine="7",model_name="m"} 1
vllm:num_requests_running{engine="x",model_name="m"} 0
vllm:num_requests_running{engine="64",model_name="m"} 0
`,
			want: Report{Running: 5, Waiting: 1, Engines: 1<<0 | 1<<1 | 1<<3, Models: []string{"m"}},
		},
		"a node's engines behind one port (hybrid balancer): their ranks from the start rank on": {
			body: `vllm:num_requests_running{engine="4",model_name="m"} 1
vllm:num_requests_running{engine="5",model_name="m"} 2
`,
			want: Report{Running: 3, Engines: 1<<4 | 1<<5, Models: []string{"m"}},
		},
		"the newer cache usage name wins over the older": {
			body: "vllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.1\n",
			want: Report{KVUsage: 0.1},
		},
		"sglang page": {
			body: sglangPage,
			want: Report{Waiting: 2, Running: 5, KVUsage: 0.28, Models: []string{"Qwen/Qwen2.5-7B-Instruct"}},
		},
		"lora info: adapter lists are sets": {
			body: `vllm:lora_requests_info{max_lora="4",running_lora_adapters="a,,b, a,b",waiting_lora_adapters="c,c"} 1.75e+09
`,
			want: Report{LoRA: &LoRAInfo{MaxLoRA: 4, Running: []string{"a", "b"}, Waiting: []string{"c"}}},
		},
		"lora info: the latest series is current": {
			body: `vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora,chat-lora",waiting_lora_adapters=""} 1.7500000001e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters="old"} 1.7e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters="nan"} NaN
`,
			want: Report{LoRA: &LoRAInfo{MaxLoRA: 4, Running: []string{"sql-lora", "chat-lora"}}},
		},
		"lora info of data-parallel engines: each engine's latest series, the adapters of all": {
			body: `vllm:lora_requests_info{engine="0",max_lora="2",running_lora_adapters="sql-lora",waiting_lora_adapters=""} 1.75e+09
vllm:lora_requests_info{engine="0",max_lora="2",running_lora_adapters="gone",waiting_lora_adapters=""} 1.7e+09
vllm:lora_requests_info{engine="1",max_lora="2",running_lora_adapters="chat-lora",waiting_lora_adapters="sql-lora"} 1.74e+09
vllm:lora_requests_info{engine="1",max_lora="2",running_lora_adapters="",waiting_lora_adapters="old"} 1.6e+09
`,
			// max_lora is each engine's: 2 + 2 slots, less the second
			// one sql-lora takes on engine 1.
			want: Report{LoRA: &LoRAInfo{MaxLoRA: 3, Running: []string{"sql-lora", "chat-lora"}, Waiting: []string{"sql-lora"}}},
		},
		"lora info of data-parallel engines: an adapter on every engine leaves a slot counted": {
			body: `vllm:lora_requests_info{engine="0",max_lora="1",running_lora_adapters="a,b",waiting_lora_adapters=""} 2
vllm:lora_requests_info{engine="1",max_lora="1",running_lora_adapters="a,b",waiting_lora_adapters=""} 2
`,
			want: Report{LoRA: &LoRAInfo{MaxLoRA: 1, Running: []string{"a", "b"}}},
		},
		"escaped quotes, timestamps, blanks and CRLF": {
			body: "# a comment\r\n\r\n" +
				"vllm:num_requests_waiting{model_name=\"a \\\"quoted\\\" } name\",engine=\"0\",} 2 1700000000000\r\n" +
				"\t vllm:num_requests_waiting { model_name = \"b\" } \t 3\r\n" +
				"vllm:num_requests_running 1e0",
			want: Report{Waiting: 5, Running: 1, Models: []string{`a "quoted" } name`, "b"}},
		},
		"quoted names as the UTF-8 form writes them": {
			body: `{"vllm:num_requests_waiting",model_name="a"} 4
"vllm:num_requests_running"{model_name="a"} 6
{model_name="a","vllm:kv_cache_usage_perc"} 0.5
`,
			want: Report{Waiting: 4, Running: 6, KVUsage: 0.5, Models: []string{"a"}},
		},
		"NaN and infinities": {
			body: `vllm:num_requests_waiting{engine="0"} NaN
vllm:num_requests_waiting{engine="1"} 2
vllm:num_requests_running +Inf
vllm:kv_cache_usage_perc{engine="0"} NaN
vllm:kv_cache_usage_perc{engine="1"} 0.25
`,
			want: Report{Waiting: 2, Running: maxCount, KVUsage: 0.25},
		},
		"out of range values are clamped": {
			body: "vllm:num_requests_waiting -3\nvllm:num_requests_running 2.6\nvllm:kv_cache_usage_perc 1.5\n",
			want: Report{Running: 3, KVUsage: 1},
		},
		"cache config labels that are not numbers read as zero": {
			body: `vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1`,
			want: Report{BlockSize: 16},
		},
		"malformed lines are skipped and counted": {
			body: `vllm:num_requests_waiting{model_name="a"} 2
vllm:num_requests_waiting{model_name="a} 2
vllm:num_requests_waiting{model_name="a"}
vllm:num_requests_waiting{model_name="a"} two
vllm:num_requests_waiting{model_name="a"} 2 soon
vllm:num_requests_waiting{model_name="a"} 0x1p3
vllm:num_requests_waiting model_name="a" 2
{model_name="a"} 2
<html>
`,
			want: Report{Waiting: 2, Models: []string{"a"}, Malformed: 8},
		},
		"other metrics are ignored": {
			body: "vllm:num_requests_waiting_total 9\nvllm:num_requests 9\nsglang:num_queue_reqs_max 9\nvllm:num_requests_waiting 1\n",
			want: Report{Waiting: 1},
		},
		"an empty body has no metrics": {
			body:    "",
			wantErr: ErrNoMetrics,
		},
		"another program's metrics": {
			body:    "# TYPE go_goroutines gauge\ngo_goroutines 12\nprocess_open_fds 9\n",
			wantErr: ErrNoMetrics,
		},
		"garbage": {
			body:    "<html><body>502 Bad Gateway</body></html>\n\x00\xff{{{\n\"\n",
			want:    Report{Malformed: 3},
			wantErr: ErrNoMetrics,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Parse([]byte(tc.body))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Parse() error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseDoesNotKeepTheBody(t *testing.T) {
	body := []byte(`vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters="b"} 1` + "\n")
	got, err := Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'x'
	}
	want := &LoRAInfo{MaxLoRA: 2, Running: []string{"a"}, Waiting: []string{"b"}}
	if diff := cmp.Diff(want, got.LoRA); diff != "" {
		t.Errorf("LoRA after the body was reused (-want +got):\n%s", diff)
	}
}

func TestParseRealisticPageSize(t *testing.T) {
	page := vllmPage(pageSpec{models: []string{"meta-llama/Llama-3.1-8B-Instruct"}})
	if n := len(page); n < 10<<10 || n > 40<<10 {
		t.Fatalf("benchmark page is %d bytes, want a realistic 10-40 KiB", n)
	}
	if got := strings.Count(page, "_bucket{"); got < 100 {
		t.Fatalf("benchmark page has %d histogram buckets, want many", got)
	}
}
func TestParseModelsAgainstPrevious(t *testing.T) {
	body := []byte(vllmPage(pageSpec{models: []string{"base", "sql-lora"}, waiting: 1, running: 1, kv: 0.5}))
	tests := map[string]struct {
		prev      []string
		want      []string
		sharePrev bool
	}{
		"no previous report":          {want: []string{"base", "sql-lora"}},
		"same models share the slice": {prev: []string{"base", "sql-lora"}, want: []string{"base", "sql-lora"}, sharePrev: true},
		"a model left":                {prev: []string{"base", "chat-lora", "sql-lora"}, want: []string{"base", "sql-lora"}},
		"a model came":                {prev: []string{"base"}, want: []string{"base", "sql-lora"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := defaultSchema.parse(body, tc.prev)
			if err != nil {
				t.Fatalf("parse() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got.Models); diff != "" {
				t.Errorf("Models (-want +got):\n%s", diff)
			}
			shared := len(tc.prev) > 0 && &got.Models[0] == &tc.prev[0]
			if shared != tc.sharePrev {
				t.Errorf("Models shares the previous slice = %v, want %v", shared, tc.sharePrev)
			}
		})
	}
}

// The LoRA state of a page is read for 64 engines at most: the series of
// further engines are skipped.
func TestParseLoRAEnginesAreBounded(t *testing.T) {
	var b strings.Builder
	for e := range maxLoRAEngines + 1 {
		fmt.Fprintf(&b, "vllm:lora_requests_info{engine=\"%d\",max_lora=\"1\",running_lora_adapters=\"a%d\",waiting_lora_adapters=\"\"} 1\n", e, e)
	}
	got, err := Parse([]byte(b.String()))
	if err != nil {
		t.Fatalf("Parse() error = %v", err)
	}
	if n := len(got.LoRA.Running); n != maxLoRAEngines || got.LoRA.MaxLoRA != maxLoRAEngines || slices.Contains(got.LoRA.Running, fmt.Sprintf("a%d", maxLoRAEngines)) {
		t.Errorf("LoRA = %d adapters, max_lora %d; want the %d of the first engines", n, got.LoRA.MaxLoRA, maxLoRAEngines)
	}
}

package scrape

import (
	"fmt"
	"strings"
)

// pageSpec describes a vLLM /metrics page for tests and benchmarks.
type pageSpec struct {
	models  []string
	waiting int
	running int
	kv      float64
}

var (
	tokenBuckets   = []string{"1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0", "1000.0", "2000.0", "5000.0", "10000.0"}
	iterBuckets    = []string{"1.0", "8.0", "16.0", "32.0", "64.0", "128.0", "256.0", "512.0", "1024.0", "2048.0", "4096.0", "8192.0", "16384.0"}
	ttftBuckets    = []string{"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0"}
	itlBuckets     = []string{"0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0"}
	latencyBuckets = []string{"0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0", "40.0", "50.0", "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0"}
)

// vllmPage renders a page shaped like the one a vLLM v1 server exposes:
// Python runtime metrics, per-model gauges, counters with _created
// companions and a dozen histograms with their buckets. The n-th model
// (from 0) reports (n+1) times the waiting and running counts and a KV usage
// of kv/(n+1).
func vllmPage(spec pageSpec) string {
	var b strings.Builder
	for _, kind := range []string{"collected", "uncollectable"} {
		fmt.Fprintf(&b, "# HELP python_gc_objects_%s_total Objects %s during gc\n# TYPE python_gc_objects_%s_total counter\n", kind, kind, kind)
		for g := range 3 {
			fmt.Fprintf(&b, "python_gc_objects_%s_total{generation=\"%d\"} %d.0\n", kind, g, 1000*(g+1))
		}
	}
	b.WriteString(`# HELP python_info Python platform information
# TYPE python_info gauge
python_info{implementation="CPython",major="3",minor="12",patchlevel="11",version="3.12.11"} 1.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 4.123456512e+09
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.75e+09
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 1234.56
# HELP process_open_fds Number of open file descriptors.
# TYPE process_open_fds gauge
process_open_fds 87.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="27911",num_gpu_blocks_override="None",prefix_caching_hash_algo="builtin",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
`)
	gauge := func(name, help string, value func(n int) string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		for n, m := range spec.models {
			fmt.Fprintf(&b, "%s{engine=\"0\",model_name=\"%s\"} %s\n", name, m, value(n))
		}
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", func(n int) string {
		return fmt.Sprintf("%d.0", spec.running*(n+1))
	})
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", func(n int) string {
		return fmt.Sprintf("%d.0", spec.waiting*(n+1))
	})
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", func(n int) string {
		return fmt.Sprint(spec.kv / float64(n+1))
	})
	counter := func(name, help string) {
		fmt.Fprintf(&b, "# HELP %s_total %s\n# TYPE %s_total counter\n", name, help, name)
		for _, m := range spec.models {
			fmt.Fprintf(&b, "%s_total{engine=\"0\",model_name=\"%s\"} 48213.0\n", name, m)
		}
		fmt.Fprintf(&b, "# HELP %s_created %s\n# TYPE %s_created gauge\n", name, help, name)
		for _, m := range spec.models {
			fmt.Fprintf(&b, "%s_created{engine=\"0\",model_name=\"%s\"} 1.7500000123e+09\n", name, m)
		}
	}
	counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
	counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
	counter("vllm:generation_tokens", "Number of generation tokens processed.")
	counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.")
	counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
	counter("vllm:external_prefix_cache_queries", "Prompt tokens looked up behind the KV connector.")
	counter("vllm:external_prefix_cache_hits", "Prompt tokens loaded through the KV connector.")
	histogram := func(name, help string, buckets []string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
		for _, m := range spec.models {
			for i, le := range buckets {
				fmt.Fprintf(&b, "%s_bucket{engine=\"0\",le=\"%s\",model_name=\"%s\"} %d.0\n", name, le, m, 40*i)
			}
			fmt.Fprintf(&b, "%s_bucket{engine=\"0\",le=\"+Inf\",model_name=\"%s\"} %d.0\n", name, m, 40*len(buckets))
			fmt.Fprintf(&b, "%s_count{engine=\"0\",model_name=\"%s\"} %d.0\n", name, m, 40*len(buckets))
			fmt.Fprintf(&b, "%s_sum{engine=\"0\",model_name=\"%s\"} 6328.120468378067\n", name, m)
		}
	}
	histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", iterBuckets)
	histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokenBuckets)
	histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", tokenBuckets)
	histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokenBuckets)
	histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", latencyBuckets)
	histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", latencyBuckets)
	histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", latencyBuckets)
	histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", latencyBuckets)
	histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", latencyBuckets)
	return b.String()
}

// v1Counters is what vllmPage's counters and histograms read as for n
// models: every counter 48213, every histogram sum 6328.12… over 40 samples
// a bucket.
func v1Counters(n int) Counters {
	f := float64(n)
	const sum = 6328.120468378067
	return Counters{
		PromptTokens: 48213 * f, PrefixQueries: 48213 * f, PrefixHits: 48213 * f, TierHits: 48213 * f,
		PrefillSeconds: sum * f, Prefills: float64(40*len(latencyBuckets)) * f,
		DecodeSeconds: sum * f, DecodeTokens: float64(40*len(itlBuckets)) * f,
	}
}

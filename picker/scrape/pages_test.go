package scrape

// Pages shaped like those of the model servers other than vLLM, for the
// preset tests. Values are chosen so that every field is told apart.

// sglangCachePage is an SGLang page with its cache config info gauge,
// whose page_size and num_pages labels hold the block size and count.
const sglangCachePage = `# HELP sglang:cache_config_info Information of the KV cache config.
# TYPE sglang:cache_config_info gauge
sglang:cache_config_info{num_pages="215880",page_size="1"} 1.0
` + sglangPage

// trtllmServePage is a trtllm-serve page (served on /prometheus/metrics):
// request histograms, counters with _created companions and the
// iteration gauges, all labelled with model_name and engine_type.
const trtllmServePage = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 14820.0
python_gc_objects_collected_total{generation="1"} 3302.0
python_gc_objects_collected_total{generation="2"} 811.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 6.812344832e+09
# HELP trtllm_request_success_total Count of successfully processed requests.
# TYPE trtllm_request_success_total counter
trtllm_request_success_total{engine_type="trtllm",finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1523.0
trtllm_request_success_total{engine_type="trtllm",finished_reason="length",model_name="meta-llama/Llama-3.1-8B-Instruct"} 87.0
# HELP trtllm_request_success_created Count of successfully processed requests.
# TYPE trtllm_request_success_created gauge
trtllm_request_success_created{engine_type="trtllm",finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7500001e+09
# HELP trtllm_time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE trtllm_time_to_first_token_seconds histogram
trtllm_time_to_first_token_seconds_bucket{engine_type="trtllm",le="0.01",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
trtllm_time_to_first_token_seconds_bucket{engine_type="trtllm",le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1404.0
trtllm_time_to_first_token_seconds_bucket{engine_type="trtllm",le="1.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1602.0
trtllm_time_to_first_token_seconds_bucket{engine_type="trtllm",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1610.0
trtllm_time_to_first_token_seconds_count{engine_type="trtllm",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1610.0
trtllm_time_to_first_token_seconds_sum{engine_type="trtllm",model_name="meta-llama/Llama-3.1-8B-Instruct"} 93.51
# HELP trtllm_kv_cache_hit_rate KV cache hit rate
# TYPE trtllm_kv_cache_hit_rate gauge
trtllm_kv_cache_hit_rate{engine_type="trtllm",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.41
# HELP trtllm_kv_cache_utilization KV cache utilization
# TYPE trtllm_kv_cache_utilization gauge
trtllm_kv_cache_utilization{engine_type="trtllm",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.3125
# HELP trtllm_num_requests_running Number of active requests
# TYPE trtllm_num_requests_running gauge
trtllm_num_requests_running{engine_type="trtllm",model_name="meta-llama/Llama-3.1-8B-Instruct"} 6.0
# HELP trtllm_num_requests_waiting Number of queued requests
# TYPE trtllm_num_requests_waiting gauge
trtllm_num_requests_waiting{engine_type="trtllm",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP trtllm_kv_cache_max_blocks Maximum number of KV cache blocks
# TYPE trtllm_kv_cache_max_blocks gauge
trtllm_kv_cache_max_blocks{engine_type="trtllm",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12850.0
# HELP trtllm_kv_cache_free_blocks Number of free KV cache blocks
# TYPE trtllm_kv_cache_free_blocks gauge
trtllm_kv_cache_free_blocks{engine_type="trtllm",model_name="meta-llama/Llama-3.1-8B-Instruct"} 8834.0
# HELP trtllm_kv_cache_used_blocks Number of used KV cache blocks
# TYPE trtllm_kv_cache_used_blocks gauge
trtllm_kv_cache_used_blocks{engine_type="trtllm",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4016.0
# HELP trtllm_kv_cache_tokens_per_block Number of tokens per KV cache block
# TYPE trtllm_kv_cache_tokens_per_block gauge
trtllm_kv_cache_tokens_per_block{engine_type="trtllm",model_name="meta-llama/Llama-3.1-8B-Instruct"} 32.0
`

// tritonPage is a Triton Inference Server page with the TensorRT-LLM
// backend: the nv_trt_llm_* families tell their values apart by a label,
// beside Triton's own nv_inference_* and nv_gpu_* series.
const tritonPage = `# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="ensemble",version="1"} 412
nv_inference_request_success{model="tensorrt_llm",version="1"} 412
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 3
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 3
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 4
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 512
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 7
# HELP nv_trt_llm_runtime_memory_metrics TRT LLM runtime memory metrics
# TYPE nv_trt_llm_runtime_memory_metrics gauge
nv_trt_llm_runtime_memory_metrics{memory_type="pinned",model="tensorrt_llm",version="1"} 0
nv_trt_llm_runtime_memory_metrics{memory_type="gpu",model="tensorrt_llm",version="1"} 1610236
# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.25
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="tensorrt_llm",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 2000
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free",model="tensorrt_llm",version="1"} 6000
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 8000
# HELP nv_trt_llm_inflight_batcher_metrics TRT LLM inflight_batcher-specific metrics
# TYPE nv_trt_llm_inflight_batcher_metrics gauge
nv_trt_llm_inflight_batcher_metrics{inflight_batcher_specific_metric="generation_requests",model="tensorrt_llm",version="1"} 3
nv_trt_llm_inflight_batcher_metrics{inflight_batcher_specific_metric="total_context_tokens",model="tensorrt_llm",version="1"} 812
# HELP nv_trt_llm_general_metrics General TRT LLM metrics
# TYPE nv_trt_llm_general_metrics gauge
nv_trt_llm_general_metrics{general_type="iteration_counter",model="tensorrt_llm",version="1"} 90412
nv_trt_llm_general_metrics{general_type="timestamp",model="tensorrt_llm",version="1"} 1750000049
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-8f3c1a52-6f0e-4c7a-9d0b-2b1f7e9c4d11"} 0.83
`

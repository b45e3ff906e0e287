package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/engine"
)

// Histogram buckets in seconds, the ones vLLM uses.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
)

// statsSource is what the metrics read on every scrape.
type statsSource interface {
	Stats() engine.Stats
	Config() engine.Config
}

// metrics is the vLLM metric set of one served model, every series
// labelled with its engine's data-parallel rank as vLLM labels them
// (engine="0" for the only one).
type metrics struct {
	handler http.Handler
	ttft    []prometheus.Observer // by engine
	e2e     []prometheus.Observer
	prefill []prometheus.Observer
	itl     []prometheus.Observer
}

// firstToken records a sequence's time to first token and its prefill time
// (the part of it not spent queued, as vLLM counts from scheduling), both
// in wall seconds, on engine e; it returns the time of the first token.
func (m *metrics) firstToken(e int, start time.Time, st engine.Status) time.Time {
	now := time.Now()
	ttft := now.Sub(start).Seconds()
	m.ttft[e].Observe(ttft)
	// The engine's simulated times give the queued share of the wall TTFT,
	// whatever the time scale.
	if st.TTFT > 0 {
		ttft *= float64(st.TTFT-st.QueueTime) / float64(st.TTFT)
	}
	m.prefill[e].Observe(max(ttft, 0))
	return now
}

// finished records a sequence's end-to-end latency on engine e and, once
// per output token after the first, the mean wall time between its tokens.
func (m *metrics) finished(e int, start, first time.Time, st engine.Status) {
	now := time.Now()
	m.e2e[e].Observe(now.Sub(start).Seconds())
	gen := st.Generated
	if first.IsZero() || gen < 2 {
		return
	}
	itl := now.Sub(first).Seconds() / float64(gen-1)
	for range gen - 1 {
		m.itl[e].Observe(itl)
	}
}

func newMetrics(model string, firstRank int, srcs []statsSource) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{}
	histogram := func(name, help string, labels prometheus.Labels, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
		reg.MustRegister(h)
		return h
	}
	for e, src := range srcs {
		rank := strconv.Itoa(firstRank + e)
		labels := prometheus.Labels{"model_name": model, "engine": rank}
		gauge := func(name, help string, value func(engine.Stats) float64) {
			reg.MustRegister(prometheus.NewGaugeFunc(
				prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
				func() float64 { return value(src.Stats()) }))
		}
		counter := func(name, help string, extra prometheus.Labels, value func(engine.Stats) int64) {
			cl := prometheus.Labels{}
			for _, ls := range []prometheus.Labels{labels, extra} {
				for k, v := range ls {
					cl[k] = v
				}
			}
			reg.MustRegister(prometheus.NewCounterFunc(
				prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl},
				func() float64 { return float64(value(src.Stats())) }))
		}

		gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
			func(s engine.Stats) float64 { return float64(s.Running) })
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
			func(s engine.Stats) float64 { return float64(s.Waiting) })
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
			func(s engine.Stats) float64 { return s.KVCacheUsage })
		counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", nil,
			func(s engine.Stats) int64 { return s.PromptTokens })
		counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", nil,
			func(s engine.Stats) int64 { return s.CachedTokens })
		counter("vllm:external_prefix_cache_queries_total", "Prompt tokens the GPU prefix cache did not hold, looked up in the offloading tier or pulled from a prefill pod.", nil,
			func(s engine.Stats) int64 { return s.OffloadQueries + s.TransferredTokens })
		counter("vllm:external_prefix_cache_hits_total", "Prompt tokens loaded from the offloading tier or pulled from a prefill pod instead of computed.", nil,
			func(s engine.Stats) int64 { return s.OffloadHits + s.TransferredTokens })
		counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", nil,
			func(s engine.Stats) int64 { return s.PromptTokens })
		counter("vllm:generation_tokens_total", "Number of generation tokens processed.", nil,
			func(s engine.Stats) int64 { return s.GenerationTokens })
		counter("vllm:request_success_total", "Count of successfully processed requests.",
			prometheus.Labels{"finished_reason": "length"},
			func(s engine.Stats) int64 { return s.Finished })

		m.ttft = append(m.ttft, histogram("vllm:time_to_first_token_seconds",
			"Histogram of time to first token in seconds (wall clock).", labels, ttftBuckets))
		m.e2e = append(m.e2e, histogram("vllm:e2e_request_latency_seconds",
			"Histogram of end to end request latency in seconds (wall clock).", labels, e2eBuckets))
		m.prefill = append(m.prefill, histogram("vllm:request_prefill_time_seconds",
			"Histogram of time spent in PREFILL phase for request.", labels, e2eBuckets))
		m.itl = append(m.itl, histogram("vllm:inter_token_latency_seconds",
			"Histogram of inter-token latency in seconds.", labels, itlBuckets))
		if src.Config().MaxLoRAs > 0 {
			reg.MustRegister(newLoRAInfo(src, rank))
		}
	}

	// Like vLLM's, the cache config info carries no model_name label.
	cfg := srcs[0].Config()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "vllm:cache_config_info",
		Help: "Information of the KV cache config.",
		ConstLabels: prometheus.Labels{
			"block_size":            strconv.Itoa(cfg.BlockSize),
			"num_gpu_blocks":        strconv.Itoa(cfg.NumGPUBlocks),
			"enable_prefix_caching": "True",
			"cache_dtype":           "auto",
		},
	})
	info.Set(1)
	reg.MustRegister(info)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

// garbageMetrics is what /metrics answers with when told to serve garbage.
const garbageMetrics = "vllm:num_requests_running{model_name=\"sim-model\" 3\n<html>not metrics</html>\n\x00\x01"

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	fc := s.cfg.Faults.Get()
	if fc.MetricsDelayMs > 0 {
		timer := time.NewTimer(time.Duration(fc.MetricsDelayMs) * time.Millisecond)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.Context().Done():
			return
		}
	}
	if fc.MetricsGarbage {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(garbageMetrics))
		return
	}
	s.metrics.handler.ServeHTTP(w, r)
}

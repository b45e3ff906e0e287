// Package scrape keeps each worker's model-server metrics fresh.
//
// A Scraper listens to the registry and polls every worker's Prometheus
// /metrics page on its own goroutine, storing what it read with
// Worker.SetMetrics. Picks only ever read that stored snapshot, so a slow or
// broken model server never holds a pick up, and the registry's listener
// calls return at once. A failed scrape keeps the previous snapshot, whose
// Scraped time then ages; the policies decide how old is too old.
//
// Wiring:
//
//	s, err := scrape.New(metrics.Registry,
//		scrape.WithInterval(opts.RefreshMetricsInterval))
//	if err != nil { ... }
//	reg.AddListener(s) // announces the workers already there
//	mgr.Add(s)         // Start polls until the manager stops
//
// Parse reads the text exposition format for the handful of series the
// picker uses (see Report) and skips everything else cheaply, allocating
// nothing but LoRA adapter names. Which series those are is a Names value
// (WithNames): by default vLLM's and SGLang's; Preset has them for vLLM,
// SGLang and TensorRT-LLM (trtllm-serve and Triton's backend), and
// ParseSeries reads the upstream endpoint picker's metric flags.
//
// Each worker's snapshot also carries what it serves (registry.Served):
// its /v1/models, read every models interval (WithModelsInterval), base
// models and LoRA adapters with their parent; failing that, the model_name
// values of its metrics. vLLM's LoRA adapter state
// (vllm:lora_requests_info) is on the snapshot too, as registry.LoRA.
package scrape

package scrape_test

import (
	"fmt"

	"github.com/inferpick/inferpick/picker/scrape"
)

// Parse reads what routing needs from a model server's metrics page.
func ExampleParse() {
	page := []byte(`# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama"} 3
vllm:num_requests_running{model_name="llama"} 5
vllm:kv_cache_usage_perc{model_name="llama"} 0.42
vllm:cache_config_info{block_size="16",num_gpu_blocks="2048"} 1
`)
	r, err := scrape.Parse(page)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Waiting, r.Running, r.KVUsage, r.BlockSize, r.NumGPUBlocks)
	// Output: 3 5 0.42 16 2048
}

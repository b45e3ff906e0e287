package extproc

import (
	"testing"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/rewrite"
)

// BenchmarkExchangeRewrite is BenchmarkExchange at 32 KB and 100 workers
// (the gateway's bodies ask for "bench-model")
// with a rewrite table: "none" has no rule for the model, "rewritten" sends
// every request to one of two targets with longer names ("model" comes
// first, so the body goes back as two chunks instead of one: the bytes
// before the value joined with the new value, then the rest). The two
// differ by what the rewrite costs.
func BenchmarkExchangeRewrite(b *testing.B) {
	for name, rules := range map[string][]rewrite.Rule{
		"none":      {{Models: []string{"other-model"}, Targets: []rewrite.Target{{Model: "x"}}}},
		"rewritten": {{Models: []string{"bench-model"}, Targets: []rewrite.Target{{Model: "bench-model-v1", Weight: 1}, {Model: "bench-model-v2", Weight: 1}}}},
	} {
		b.Run(name, func(b *testing.B) {
			reg := benchRegistry(100)
			pol, err := policy.Build(policy.Config{Name: policy.CacheAware}, reg)
			if err != nil {
				b.Fatal(err)
			}
			tbl := rewrite.NewTable()
			tbl.Set("bench", rewrite.Object{Rules: rules})
			gw := startGateway(b, benchServe(b, New(reg, pol, Options{Fallbacks: 2, Rewrites: tbl})), 32<<10)
			for range 256 {
				gw.exchange(b)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(benchChatBody(0, 0, 32<<10))))
			cpu := cpuTime()
			for b.Loop() {
				gw.exchange(b)
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

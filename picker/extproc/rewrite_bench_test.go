package extproc

import (
	"testing"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/rewrite"
)

// BenchmarkExchangeRewrite is BenchmarkExchange at 32 KB and 100 workers
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
			client := benchServe(b, New(reg, pol, Options{Fallbacks: 2, Rewrites: tbl}))
			bodies := make([][]byte, 64)
			for i := range bodies {
				bodies[i] = benchChatBody(i%benchTenants, i, 32<<10)
			}
			ctx := b.Context()
			for i := range 4 * len(bodies) {
				benchRoundTrip(ctx, b, client, bodies[i%len(bodies)])
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(bodies[0])))
			i := 0
			for b.Loop() {
				benchRoundTrip(ctx, b, client, bodies[i%len(bodies)])
				i++
			}
		})
	}
}

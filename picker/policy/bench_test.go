package policy

import (
	"fmt"
	"testing"
)

// BenchmarkPick is one whole pick of a 32 KB chat prompt (a 16 KB system
// prompt shared by its tenant, a 16 KB conversation) on a warm index.
func BenchmarkPick(b *testing.B) {
	for _, workers := range []int{8, 100, 1000} {
		for _, name := range []string{CacheAware, WeightedScorer, LeastLoad} {
			b.Run(fmt.Sprintf("%s/workers=%d", name, workers), func(b *testing.B) {
				reg, ws := bigPool(workers)
				p, err := Build(Config{Name: name}, reg)
				if err != nil {
					b.Fatal(err)
				}
				const tenants = 50
				systems := make([][]byte, tenants)
				for i := range systems {
					systems[i] = text(fmt.Sprint("tenant", i), 16<<10)
				}
				for i := range 2000 {
					req := &Request{Model: "m", Prompt: [][]byte{systems[i%tenants], text(fmt.Sprint("conv", i), 16<<10)}}
					if _, err := p.Pick(req, ws, 1); err != nil {
						b.Fatal(err)
					}
				}
				reqs := make([]*Request, 64)
				for i := range reqs {
					reqs[i] = &Request{Model: "m", Prompt: [][]byte{systems[i%tenants], text(fmt.Sprint("conv", i), 16<<10)}}
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, err := p.Pick(reqs[i%len(reqs)], ws, 3); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

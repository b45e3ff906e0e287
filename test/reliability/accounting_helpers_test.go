package reliability

import (
	"fmt"
	"testing"
	"time"
)

// releases sums inferpick_guard_releases_total by reason.
func releases(pp promPage) map[string]float64 {
	return pp.SumBy("inferpick_guard_releases_total", "reason")
}

// loadSampler polls /debug/workers in the background and remembers the
// lowest prefill and decode it saw on any worker.
type loadSampler struct {
	stop    chan struct{}
	done    chan struct{}
	samples int
	minSeen int64
	bad     string
}

func sampleLoads(p *picker) *loadSampler {
	s := &loadSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			v, err := p.Workers()
			if err != nil {
				continue
			}
			s.samples++
			for i := range v.Workers {
				w := &v.Workers[i]
				for _, n := range []int64{w.Prefill, w.Decode, w.Load} {
					if n < s.minSeen {
						s.minSeen = n
						s.bad = fmt.Sprintf("worker %s: load %d prefill %d decode %d", w.Address, w.Load, w.Prefill, w.Decode)
					}
				}
			}
		}
	}()
	return s
}

// Stop ends the sampling and fails the test if a count went negative.
func (s *loadSampler) Stop(t testing.TB) {
	t.Helper()
	close(s.stop)
	<-s.done
	if s.minSeen < 0 {
		t.Errorf("a load count went negative: %s", s.bad)
	}
	t.Logf("sampled /debug/workers %d times during the run", s.samples)
}

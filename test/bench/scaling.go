package main

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"runtime"
	"strconv"
	"strings"

	"github.com/inferpick/inferpick/picker/extproc"
	"github.com/inferpick/inferpick/picker/extproc/extproctest"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/test/bench/proc"
)

// Each point of the scaling table is the median of scalingRounds rounds of
// scalingCPU seconds of CPU each.
const (
	scalingRounds = 3
	scalingCPU    = 0.3
)

// scalingPoint is the cost of one pick, and the memory of everything a
// pick reads, at one pool size and body size.
type scalingPoint struct {
	Workers, BodyBytes int
	NsPerPick          float64
	AllocsPerPick      int64
	// HeapBytes is the live heap of the registry, the cache-aware policy
	// with its prefix index (warm with the point's traffic) and the ext_proc
	// server, measured after a collection.
	HeapBytes int64
}

// Pool and body sizes of the scaling table.
var (
	scalingWorkers = []int{8, 100, 1000, 5000}
	scalingBodies  = []int{1 << 10, 32 << 10, 400 << 10}
)

// scalingTable measures, in this process, the whole pick (the ext_proc
// handler on an in-memory stream: body parse, cache-aware pick on a warm
// index, guard, replies) at every pool and body size.
func scalingTable(ctx context.Context) ([]scalingPoint, error) {
	var out []scalingPoint
	for _, workers := range scalingWorkers {
		for _, size := range scalingBodies {
			p, err := scalingOnce(ctx, workers, size)
			if err != nil {
				return nil, fmt.Errorf("scaling %d workers, %d KB: %w", workers, size>>10, err)
			}
			log.Printf("scaling: %4d workers, %3d KB body: %s per pick, %d allocs, live heap %.1f MB",
				workers, size>>10, human(p.NsPerPick), p.AllocsPerPick, float64(p.HeapBytes)/(1<<20))
			out = append(out, p)
		}
	}
	return out, nil
}

func scalingOnce(ctx context.Context, workers, size int) (scalingPoint, error) {
	p := scalingPoint{Workers: workers, BodyBytes: size}
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)

	reg := registry.New()
	eps := make([]registry.Endpoint, workers)
	for i := range eps {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 8000)
		eps[i] = registry.Endpoint{Key: registry.Key{UID: "uid-" + strconv.Itoa(i), Port: 8000}, Name: addr.String(), Address: addr}
	}
	reg.Replace(eps)
	reg.MarkSynced()
	// A picker deployed alone, as cmd/inferpick runs without leader election.
	pol, err := policy.Build(policy.Config{Name: policy.CacheAware, CacheAware: policy.CacheAwareConfig{Replicas: 1}}, reg)
	if err != nil {
		return p, err
	}
	srv := extproc.New(reg, pol, extproc.Options{Fallbacks: 2})
	streams := make([]*extproctest.MemStream, 64)
	for i := range streams {
		streams[i] = extproctest.NewMemStream(ctx, extproc.Codec(), loadBody(i%16, i, size))
	}
	var failed error
	run := func(st *extproctest.MemStream) { //nolint:contextcheck // the stream carries the context
		st.Rewind()
		if err := srv.Process(st); err != nil && failed == nil {
			failed = err
		}
		if st.Replies < 2 && failed == nil {
			failed = fmt.Errorf("got %d replies, want the routing reply and the body", st.Replies)
		}
	}
	for i := range 4 * len(streams) {
		run(streams[i%len(streams)])
	}
	if failed != nil {
		return p, failed
	}
	// CPU time of this process, not wall time: the machine is shared, and
	// nothing else in this process runs meanwhile. The median of a few
	// rounds, as a collection may land in any of them.
	var perOp []float64
	var before, after runtime.MemStats
	ops := 0
	for range scalingRounds {
		runtime.ReadMemStats(&before)
		cpu0, n := proc.SelfCPUSeconds(), 0
		for proc.SelfCPUSeconds()-cpu0 < scalingCPU {
			for range 8 {
				run(streams[ops%len(streams)])
				ops++
				n++
			}
		}
		perOp = append(perOp, (proc.SelfCPUSeconds()-cpu0)*1e9/float64(n))
		runtime.ReadMemStats(&after)
		p.AllocsPerPick = int64(after.Mallocs-before.Mallocs) / int64(n)
	}
	if failed != nil {
		return p, failed
	}
	p.NsPerPick = median(perOp)

	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	p.HeapBytes = int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	runtime.KeepAlive(srv)
	runtime.KeepAlive(streams)
	// The request bodies are the benchmark's, not the picker's.
	for _, st := range streams {
		p.HeapBytes -= int64(st.BodyLen())
	}
	return p, nil
}

// scalingMarkdown is the scaling section of the report.
func scalingMarkdown(ps []scalingPoint, plotDir string) string {
	if len(ps) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Scaling: cost per request and memory vs workers and body size\n\n")
	w("The whole pick in this process, CPU time per request (`getrusage`; the median of %d rounds of %g s of CPU, so\n", scalingRounds, scalingCPU)
	w("that the shared machine's other work does not count): the ext_proc handler on an in-memory stream (request\n")
	w("headers, the body in 16 KB chunks, body parse, cache-aware pick on a warm prefix index, guard, replies), 64\n")
	w("chat bodies from 16 tenants (half the body a tenant's system prompt), no transport. Memory is the live heap,\n")
	w("after a collection, of the registry, the policy with its index warm with that traffic, and the server.\n\n")
	w("| workers |")
	for _, size := range scalingBodies {
		w(" pick, %d KB | allocs |", size>>10)
	}
	w(" live heap (1 KB traffic) | per worker beyond %d |\n|---:|", scalingWorkers[0])
	for range scalingBodies {
		w("---:|---:|")
	}
	w("---:|---:|\n")
	base, _ := findPoint(ps, scalingWorkers[0], scalingBodies[0])
	for _, n := range scalingWorkers {
		var heap int64 = -1
		w("| %d |", n)
		for _, size := range scalingBodies {
			p, ok := findPoint(ps, n, size)
			if !ok {
				w(" – | – |")
				continue
			}
			w(" %s | %d |", human(p.NsPerPick), p.AllocsPerPick)
			if size == scalingBodies[0] {
				heap = p.HeapBytes
			}
		}
		switch {
		case heap >= 0 && n > base.Workers:
			w(" %.2f MB | %.0f B |\n", float64(heap)/(1<<20), float64(heap-base.HeapBytes)/float64(n-base.Workers))
		case heap >= 0:
			w(" %.2f MB | – |\n", float64(heap)/(1<<20))
		default:
			w(" – | – |\n")
		}
	}
	w("\n![pick cost vs workers](%s)\n\n![live heap vs workers](%s)\n\n", plotPath(plotDir, plotScalingPick), plotPath(plotDir, plotScalingHeap))
	return b.String()
}

func findPoint(ps []scalingPoint, workers, size int) (scalingPoint, bool) {
	for _, p := range ps {
		if p.Workers == workers && p.BodyBytes == size {
			return p, true
		}
	}
	return scalingPoint{}, false
}

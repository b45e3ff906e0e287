//go:build unix

package scrape

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// BenchmarkParse parses a page as a poller does after its first scrape:
// with the model names of the previous report at hand.
func BenchmarkParse(b *testing.B) {
	page := []byte(pageWith(4, 12, 0.37))
	first, err := Parse(page)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		if _, err := defaultSchema.parse(page, first.Models); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// BenchmarkParsePresets parses each server's page with its preset.
func BenchmarkParsePresets(b *testing.B) {
	for name, tc := range map[string]struct{ kind, page string }{
		"vllm":         {VLLM, pageWith(4, 12, 0.37)},
		"sglang":       {SGLang, sglangCachePage},
		"trtllm-serve": {TRTLLM, trtllmServePage},
		"triton":       {TRTLLM, tritonPage},
	} {
		b.Run(name, func(b *testing.B) {
			s, err := NewSchema(mustPreset(b, tc.kind))
			if err != nil {
				b.Fatal(err)
			}
			page := []byte(tc.page)
			b.SetBytes(int64(len(page)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Parse(page); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// reportCPU reports the process CPU time per iteration since start: on a
// shared machine it is steadier than the wall-clock ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkParseReference parses the same page with the reference parser,
// for comparison.
func BenchmarkParseReference(b *testing.B) {
	page := []byte(pageWith(4, 12, 0.37))
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		p := expfmt.NewTextParser(model.UTF8Validation)
		if _, err := p.TextToMetricFamilies(bytes.NewReader(page)); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// BenchmarkScrape runs whole scrapes (request, response, parse, store)
// against a loopback server serving a realistic vLLM page, in this process
// (InProcess: the CPU time includes the server's share) or in a child
// process (Client: the CPU time is the picker's alone). Besides ns/op it
// reports the CPU time per scrape and what that adds up to for 100 workers
// scraped every DefaultInterval.
func BenchmarkScrape(b *testing.B) {
	b.Run("InProcess", func(b *testing.B) {
		srv := newModelServer(b, servePage)
		benchmarkScrape(b, srv.addr())
	})
	b.Run("Client", func(b *testing.B) {
		benchmarkScrape(b, startPageServer(b, 1)[0])
	})
}

// BenchmarkScrapePool runs a real Scraper with its default interval over
// 100 workers served by a child process, one second per iteration, and
// reports the CPU it used (cores) and per scrape.
func BenchmarkScrapePool(b *testing.B) {
	const workers = 100
	addrs := startPageServer(b, workers)
	for b.Loop() {
		metrics := prometheus.NewRegistry()
		s, err := New(metrics)
		if err != nil {
			b.Fatal(err)
		}
		reg := registry.New()
		for i, addr := range addrs {
			registrytest.Upsert(reg, endpoint(strconv.Itoa(i), addr))
		}
		reg.AddListener(s)
		ctx, cancel := context.WithTimeout(b.Context(), time.Second)
		wall, cpu := time.Now(), cpuTime()
		_ = s.Start(ctx)
		cancel()
		elapsed, used := time.Since(wall), cpuTime()-cpu
		scrapes := scrapeCount(b, metrics)
		b.ReportMetric(used.Seconds()/elapsed.Seconds(), "cores")
		b.ReportMetric(float64(used.Nanoseconds())/scrapes, "cpu-ns/scrape")
		b.ReportMetric(scrapes/elapsed.Seconds(), "scrapes/s")
		b.ReportMetric(errorCount(b, metrics)/scrapes, "errors/scrape")
	}
}

// errorCount is the failed scrapes, whatever the reason.
func errorCount(b *testing.B, g prometheus.Gatherer) float64 {
	families, err := g.Gather()
	if err != nil {
		b.Fatal(err)
	}
	n := 0.0
	for _, f := range families {
		if f.GetName() == "inferpick_scrape_errors_total" {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func scrapeCount(b *testing.B, g prometheus.Gatherer) float64 {
	families, err := g.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "inferpick_scrape_duration_seconds" {
			return float64(f.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	b.Fatal("no scrape duration histogram")
	return 0
}

func servePage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(benchPage)
}

var benchPage = []byte(pageWith(4, 12, 0.37))

func benchmarkScrape(b *testing.B, addr netip.AddrPort) {
	reg := registry.New()
	w := registrytest.Upsert(reg, endpoint("bench", addr))
	s, err := New(nil)
	if err != nil {
		b.Fatal(err)
	}
	p := newPoller(s, w)
	ctx := b.Context()
	p.scrape(ctx) // open the connection
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		p.scrape(ctx)
	}
	cpu := cpuTime() - start
	if st := p.status.Load(); st == nil || st.Err != nil {
		b.Fatalf("scrape failed: %+v", st)
	}
	perScrape := float64(cpu.Nanoseconds()) / float64(b.N)
	b.ReportMetric(perScrape, "cpu-ns/scrape")
	scrapesPerSecond := 100 * float64(time.Second/DefaultInterval)
	b.ReportMetric(scrapesPerSecond*perScrape/1e9, "cores/100-workers")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pageServerEnv makes the test binary serve benchPage instead of running
// tests; see TestMain.
const pageServerEnv = "INFERPICK_SCRAPE_PAGE_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(pageServerEnv) == "1" {
		servePageUntilStdinCloses()
		return
	}
	os.Exit(m.Run())
}

// servePageUntilStdinCloses serves benchPage on loopback ports (as many as
// pageServerPortsEnv says), prints their addresses, one a line, and exits
// when its parent closes stdin (or dies).
func servePageUntilStdinCloses() {
	n, _ := strconv.Atoi(os.Getenv(pageServerPortsEnv))
	for range max(n, 1) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(ln.Addr())
		go func() { _ = http.Serve(ln, http.HandlerFunc(servePage)) }()
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

const pageServerPortsEnv = "INFERPICK_SCRAPE_PAGE_SERVER_PORTS"

// startPageServer runs the page server in a child process for the rest of
// the benchmark and returns the addresses it serves on.
func startPageServer(b *testing.B, ports int) []netip.AddrPort {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), pageServerEnv+"=1", pageServerPortsEnv+"="+strconv.Itoa(ports))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	r := bufio.NewReader(stdout)
	addrs := make([]netip.AddrPort, ports)
	for i := range addrs {
		line, err := r.ReadString('\n')
		if err != nil {
			b.Fatalf("page server: %v", err)
		}
		if addrs[i], err = netip.ParseAddrPort(line[:len(line)-1]); err != nil {
			b.Fatalf("page server address %q: %v", line, err)
		}
	}
	return addrs
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/inferpick/inferpick/test/bench/proc"
	"github.com/inferpick/inferpick/test/framework"
)

// scrapeResult is the picker's CPU while it scrapes idle model servers.
type scrapeResult struct {
	Endpoints int
	Interval  time.Duration
	PageBytes int
	Seconds   float64
	// Cores is CPU seconds per second of the picker process, doing nothing
	// but scraping.
	Cores float64
}

// scrapeCost runs the inferpick binary over 100 endpoints serving a
// simulator's metrics page at the default interval, with no requests, and
// reads its CPU use from /proc.
func scrapeCost(ctx context.Context, pickerBin, page string, quick bool) (*scrapeResult, error) {
	const endpoints = 100
	pk, stop, err := startOverFarm(pickerBin, page, endpoints, "least-load")
	if err != nil {
		return nil, err
	}
	defer stop()
	dur := 10 * time.Second
	if quick {
		dur = 3 * time.Second
	}
	// Let connections and buffers settle.
	time.Sleep(time.Second)
	c0, err := pk.p.CPUSeconds()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(dur):
	}
	c1, err := pk.p.CPUSeconds()
	if err != nil {
		return nil, err
	}
	secs := time.Since(start).Seconds()
	return &scrapeResult{Endpoints: endpoints, Interval: 50 * time.Millisecond, PageBytes: len(page), Seconds: secs, Cores: (c1 - c0) / secs}, nil
}

// simMetricsPage starts one simulator and returns its /metrics page, the
// page every fake endpoint of the load and scrape tests serves.
func simMetricsPage(simBin string) (string, error) {
	port, err := framework.FreePort("127.0.0.1")
	if err != nil {
		return "", err
	}
	p, err := proc.Start("vllm-sim", simBin, "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	if err != nil {
		return "", err
	}
	defer p.Stop(5 * time.Second)
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	if err := proc.WaitHTTP(p, url, 30*time.Second, nil); err != nil {
		return "", err
	}
	resp, err := http.Get(url)
	if err != nil {
		return "", fmt.Errorf("metrics page: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("metrics page: %w", err)
	}
	return string(b), nil
}

package routing

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/inferpick/inferpick/test/gateway"
)

// Result is what one policy did on one workload.
type Result struct {
	Policy   string
	Workload string
	Rate     float64
	Sent, OK int
	// Completed is false when requests failed or the run hit its deadline.
	Completed bool
	// TTFT holds each successful request's time to first token in
	// simulated seconds, as the client measured it (SimSpec.ScaleTransport
	// says how), so it includes the gateway and picker overhead.
	TTFT []float64
	// SentAt is, for each TTFT in the same order, when its request was
	// sent: simulated seconds since the run began.
	SentAt []float64
	// SimMeanTTFT is the simulators' own mean simulated TTFT (engine time,
	// no transport), weighted by requests.
	SimMeanTTFT float64
	// HitRate is cached / prompt tokens over all simulators; Oracle is what
	// a perfect router reaches on the same workload.
	HitRate, Oracle float64
	// LoadedRate is the share of the prompt tokens the simulators loaded
	// back from their offloading tiers (not in HitRate).
	LoadedRate float64
	// Throughput is completed requests per simulated second, from the first
	// send to the last answer.
	Throughput float64
	// SkewAvg is max/mean over pods of the time-averaged in-flight count;
	// SkewPeak is max/mean at the busiest sample.
	SkewAvg, SkewPeak float64
	// Load is the per-pod in-flight samples, for the load-over-time plot.
	Load []LoadSample
	// PodRequests is how many requests each simulator received.
	PodRequests []int64
	// LoRALoads is how many LoRA adapters the simulators loaded, and
	// LoRARequests how many requests named an adapter.
	LoRALoads    int64
	LoRARequests int
	// TTFTBy and RefusedBy split TTFT and the 429 answers by the requests'
	// objective (workloads that set one).
	TTFTBy    map[string][]float64
	RefusedBy map[string]int
}

// QuantileOf returns the q-quantile of v (nearest rank).
func QuantileOf(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[QuantileRank(len(s), q)-1]
}

// QuantileRank is the rank, from 1 for the least, of the value QuantileOf
// takes as the q-quantile of n > 0 values.
func QuantileRank(n int, q float64) int { return min(max(int(q*float64(n)+0.5), 1), n) }

// LoadSample is the picker's view of per-pod requests in flight at At
// (simulated seconds since the start of the run).
type LoadSample struct {
	At   float64
	Load []int64
}

// Quantile returns the q-quantile of TTFT (nearest rank).
func (r *Result) Quantile(q float64) float64 { return QuantileOf(r.TTFT, q) }

// QuantileFrom is Quantile over the requests sent from the simulated time
// from on, once a cold run's first prefills are behind it.
func (r *Result) QuantileFrom(q, from float64) float64 {
	var v []float64
	for i, t := range r.TTFT {
		if r.SentAt[i] >= from {
			v = append(v, t)
		}
	}
	return QuantileOf(v, q)
}

// QuantileAll is Quantile over every request sent, one that was never
// answered counting as slower than any answer (+Inf): a policy cannot
// improve its tail by failing requests.
func (r *Result) QuantileAll(q float64) float64 {
	v := append(make([]float64, 0, max(r.Sent, len(r.TTFT))), r.TTFT...)
	for range r.Sent - len(r.TTFT) {
		v = append(v, math.Inf(1))
	}
	return QuantileOf(v, q)
}

// driver sends a workload's requests through the cluster's gateway.
type driver struct {
	c      *Cluster
	pin    func(Request) int // Workload.Pin
	client *http.Client
	scale  float64
	// scaleAll scales a request's wall time until the pod's response
	// headers too (SimSpec.ScaleTransport).
	scaleAll bool
	start    time.Time
	mu       sync.Mutex
	ttft     []float64
	sentAt   []float64
	ok       int
	last     time.Time
	ttftBy   map[string][]float64
	refBy    map[string]int
}

// Run drives w through c and gathers the result. Requests still open at
// the deadline (simulated time after the last arrival) are cancelled.
func Run(ctx context.Context, c *Cluster, w *Workload, deadline time.Duration) (*Result, error) {
	d := &driver{c: c, pin: w.Pin, scale: c.spec.TimeScale, scaleAll: c.spec.ScaleTransport, ttftBy: map[string][]float64{}, refBy: map[string]int{}, client: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 1024, DisableCompression: true,
	}}}
	defer d.client.CloseIdleConnections()
	res := &Result{Workload: w.Name, Rate: w.Rate, Sent: w.Len(), Oracle: Oracle(w, c.spec.BlockSize)}
	for _, r := range w.order() {
		if r.Model != "" {
			res.LoRARequests++
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sampled := make(chan []LoadSample, 1)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	d.start = time.Now()
	go func() { sampled <- d.sample(sampleCtx) }()

	var wg sync.WaitGroup
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	switch w.Kind {
	case Open:
		for _, r := range w.Requests {
			if !d.sleepUntil(runCtx, r.At) {
				break
			}
			wg.Go(func() { d.send(runCtx, r) })
		}
	case Sessions:
		for i, s := range w.Sessions {
			wg.Go(func() {
				// Sessions start spread over one think time, and each
				// think lasts 0.5 to 1.5 × Think (seeded by the session):
				// sessions in lockstep would reach a round-robin picker in
				// a fixed cycle, each always landing on the same pod.
				rng := rand.New(rand.NewPCG(uint64(i), 17))
				time.Sleep(d.wall(w.Think * time.Duration(i) / time.Duration(len(w.Sessions))))
				for _, r := range s {
					if !d.send(runCtx, r) {
						return
					}
					time.Sleep(d.wall(time.Duration((0.5 + rng.Float64()) * float64(w.Think))))
				}
			})
		}
	case Burst:
		for _, r := range w.Warm {
			d.send(runCtx, r)
		}
		// Let the picker see the warm request's load go before the burst.
		time.Sleep(d.wall(500 * time.Millisecond))
		for _, r := range w.Requests {
			wg.Go(func() { d.send(runCtx, r) })
		}
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	timer := time.NewTimer(d.wall(deadline))
	select {
	case <-finished:
		timer.Stop()
	case <-timer.C:
		cancelRun()
		<-finished
	}
	stopSampling()
	res.Load = <-sampled

	d.mu.Lock()
	res.TTFT, res.SentAt, res.OK = d.ttft, d.sentAt, d.ok
	res.TTFTBy, res.RefusedBy = d.ttftBy, d.refBy
	span := d.last.Sub(d.start).Seconds() / d.scale
	d.mu.Unlock()
	res.Completed = res.OK == res.Sent
	if span > 0 {
		res.Throughput = float64(res.OK) / span
	}
	res.SkewAvg, res.SkewPeak = skew(res.Load)
	// The totals of a run cut short by an interrupt are still read.
	if err := d.collectSims(context.WithoutCancel(ctx), res); err != nil {
		return nil, err
	}
	return res, nil
}

// wall converts simulated time to wall time.
func (d *driver) wall(sim time.Duration) time.Duration {
	return time.Duration(float64(sim) * d.scale)
}

func (d *driver) sleepUntil(ctx context.Context, at time.Duration) bool {
	wait := time.Until(d.start.Add(d.wall(at)))
	if wait <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// chunk is the part of a streamed chat event the client reads.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
}

// send issues one streamed chat completion and records its TTFT. It
// reports whether the request succeeded.
func (d *driver) send(ctx context.Context, r Request) bool {
	model := r.Model
	if model == "" {
		model = "sim-model"
	}
	body, err := json.Marshal(map[string]any{
		"model": model, "messages": r.Messages, "stream": true,
		"max_tokens": d.c.spec.MaxTokens,
	})
	if err != nil {
		return false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.c.gwAddr+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	if r.Objective != "" {
		req.Header.Set("x-gateway-inference-objective", r.Objective)
	}
	if d.pin != nil {
		req.Header.Set(gateway.SubsetHintHeader, d.c.spec.Addr(d.pin(r)%d.c.spec.Pods))
	}
	begin := time.Now()
	resp, err := d.client.Do(req)
	if err != nil {
		return false
	}
	answered := time.Since(begin)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusTooManyRequests {
			d.mu.Lock()
			d.refBy[r.Objective]++
			d.mu.Unlock()
		}
		return false
	}
	var first time.Duration
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		if first == 0 {
			var c chunk
			if json.Unmarshal([]byte(line), &c) == nil && len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				first = time.Since(begin)
			}
		}
	}
	if !done || first == 0 {
		return false
	}
	ttft := d.simulated(answered, first)
	d.mu.Lock()
	d.ttft = append(d.ttft, ttft)
	d.sentAt = append(d.sentAt, begin.Sub(d.start).Seconds()/d.scale)
	d.ttftBy[r.Objective] = append(d.ttftBy[r.Objective], ttft)
	d.ok++
	d.last = time.Now()
	d.mu.Unlock()
	return true
}

// simulated is a request's TTFT in simulated seconds from the wall times
// until the pod's response headers (answered) and until the first token.
// The simulator answers with its headers as soon as it has queued the
// request, so the time until then is this host's work (the gateway, the
// pick, the pod's admission) and counts at its wall duration: compressing
// the engines' time does not make the host faster, and dividing it by the
// time scale would multiply what the host's load costs a request. The time
// after it, the engine's queue and prefill, is scaled. With scaleAll, both
// are scaled.
func (d *driver) simulated(answered, first time.Duration) float64 {
	if d.scaleAll {
		return first.Seconds() / d.scale
	}
	return answered.Seconds() + (first-answered).Seconds()/d.scale
}

// sampleEvery is the wall-time period of the load samples.
const sampleEvery = 10 * time.Millisecond

// sample reads the picker's per-pod in-flight counts until ctx ends.
func (d *driver) sample(ctx context.Context) []LoadSample {
	var out []LoadSample
	if d.c.debug == "" { // the upstream picker: no per-pod view
		<-ctx.Done()
		return nil
	}
	client := &http.Client{Timeout: time.Second}
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		var v workersView
		if err := getJSON(ctx, client, d.c.debug, &v); err != nil {
			continue
		}
		s := LoadSample{At: time.Since(d.start).Seconds() / d.scale}
		for _, w := range v.Workers {
			s.Load = append(s.Load, w.Load)
		}
		out = append(out, s)
	}
}

// skew returns max/mean of the per-pod time-averaged load, and max/mean
// at the sample with the most requests in flight.
func skew(samples []LoadSample) (avg, peak float64) {
	if len(samples) == 0 {
		return 0, 0
	}
	sum := make([]float64, len(samples[0].Load))
	busiest, most := -1, int64(0)
	for i, s := range samples {
		var total int64
		for j, l := range s.Load {
			if j < len(sum) {
				sum[j] += float64(l)
			}
			total += l
		}
		if total > most {
			busiest, most = i, total
		}
	}
	avg = maxOverMean(sum)
	if busiest >= 0 {
		f := make([]float64, len(samples[busiest].Load))
		for j, l := range samples[busiest].Load {
			f[j] = float64(l)
		}
		peak = maxOverMean(f)
	}
	return avg, peak
}

func maxOverMean(v []float64) float64 {
	var total, top float64
	for _, x := range v {
		total += x
		top = max(top, x)
	}
	if total == 0 {
		return 0
	}
	return top / (total / float64(len(v)))
}

// collectSims reads every simulator's totals into res.
func (d *driver) collectSims(ctx context.Context, res *Result) error {
	client := &http.Client{Timeout: 5 * time.Second}
	var prompt, cached, loaded, finished int64
	var ttftSum float64
	for i := range d.c.spec.Pods {
		var s simStats
		if err := getJSON(ctx, client, "http://"+d.c.spec.Addr(i)+"/sim/stats", &s); err != nil {
			return err
		}
		prompt += s.PromptTokens
		cached += s.CachedTokens
		loaded += s.Offloaded
		finished += s.Finished
		ttftSum += s.MeanTTFT * float64(s.Finished)
		res.LoRALoads += s.LoRALoads
		res.PodRequests = append(res.PodRequests, s.Requests)
	}
	if prompt > 0 {
		res.HitRate = float64(cached) / float64(prompt)
		res.LoadedRate = float64(loaded) / float64(prompt)
	}
	if finished > 0 {
		res.SimMeanTTFT = ttftSum / float64(finished)
	}
	return nil
}

func getJSON(ctx context.Context, client *http.Client, url string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New("get " + url + ": " + resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	return nil
}

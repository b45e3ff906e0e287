package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferpick/inferpick/test/bench/proc"
	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// loadResult is the ext_proc load test at one prompt size.
type loadResult struct {
	PromptBytes int
	Streams     int
	Requests    int64
	Seconds     float64
	// PickerCPU is the picker process's CPU seconds over the run, less its
	// idle rate (scraping) measured before.
	PickerCPU float64
	// ClientCPU is this process's CPU over the run (the load generator and
	// the fake model servers' metrics pages).
	ClientCPU float64
	// Rounds is how many rounds this one is the median of.
	Rounds int
}

func (r loadResult) rps() float64 { return float64(r.Requests) / r.Seconds }

// cpuPerRequest is picker CPU seconds per request.
func (r loadResult) cpuPerRequest() float64 { return r.PickerCPU / float64(r.Requests) }

// loadTest drives the inferpick binary over loopback gRPC with no model
// server behind it: many concurrent streams each doing request headers and
// body, the routing reply, response headers and a few SSE chunks, end.
func loadTest(ctx context.Context, pickerBin, page string, quick bool) ([]loadResult, error) {
	pk, stop, err := startOverFarm(pickerBin, page, 8, "cache-aware")
	if err != nil {
		return nil, err
	}
	defer stop()
	conn, err := grpc.NewClient(pk.grpc, append(gateway.EnvoyDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, fmt.Errorf("picker client: %w", err)
	}
	defer conn.Close()
	client := extprocv3.NewExternalProcessorClient(conn)

	idle := 2 * time.Second
	if quick {
		idle = time.Second
	}
	dur, rounds := loadRounds(quick)
	idleRate, err := pk.p.IdleRate(ctx, idle)
	if err != nil {
		return nil, err
	}
	shapes := loadShapes()
	return medianRounds(rounds, len(shapes), func(i int) (loadResult, error) {
		return loadOnce(ctx, client, pk.p, shapes[i].size, shapes[i].streams, dur, idleRate)
	})
}

// loadRounds are how long one round of a load test setting lasts and how
// many rounds each setting runs.
func loadRounds(quick bool) (time.Duration, int) {
	if quick {
		return 2 * time.Second, 1
	}
	return 8 * time.Second, 3
}

// loadShape is one setting of the load test: concurrent streams and body
// bytes.
type loadShape struct{ streams, size int }

// loadShapes are the load test's settings: 8 concurrent streams, the setting
// the upstream picker was first compared in, and 32, each at 1, 32 and
// 400 KB.
func loadShapes() []loadShape {
	var out []loadShape
	for _, streams := range []int{8, 32} {
		for _, size := range []int{1 << 10, 32 << 10, 400 << 10} {
			out = append(out, loadShape{streams, size})
		}
	}
	return out
}

// medianRounds runs run(0) … run(n-1) in turn, rounds times over, so that the
// machine's drift falls on every setting alike, and returns each setting's
// median round by CPU per request.
func medianRounds(rounds, n int, run func(i int) (loadResult, error)) ([]loadResult, error) {
	runs := make([][]loadResult, n)
	for range rounds {
		for i := range n {
			r, err := run(i)
			if err != nil {
				return nil, err
			}
			runs[i] = append(runs[i], r)
		}
	}
	out := make([]loadResult, n)
	for i, rs := range runs {
		slices.SortFunc(rs, func(a, b loadResult) int { return cmp.Compare(a.cpuPerRequest(), b.cpuPerRequest()) })
		out[i] = rs[len(rs)/2]
		out[i].Rounds = len(rs)
	}
	return out, nil
}

// loadOnce is one round of the load test: streams concurrent streams of
// size-byte bodies for dur.
func loadOnce(ctx context.Context, client extprocv3.ExternalProcessorClient, p *proc.Process, size, streams int, dur time.Duration, idleRate float64) (loadResult, error) {
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = loadBody(i%16, i, size)
	}
	// Warm up the index and the connection.
	for i := range 2 * len(bodies) {
		if err := exchange(ctx, client, bodies[i%len(bodies)]); err != nil {
			return loadResult{}, err
		}
	}
	var n atomic.Int64
	var firstErr error
	var errOnce sync.Once
	// A cancel rather than a deadline: a deadline travels to the picker as
	// grpc-timeout and may end a stream there before this side notices.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopAt := time.AfterFunc(dur, cancel)
	defer stopAt.Stop()
	cpu0, _ := p.CPUSeconds()
	self0 := proc.SelfCPUSeconds()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range streams {
		wg.Go(func() {
			for i := w; runCtx.Err() == nil; i += streams {
				if err := exchange(runCtx, client, bodies[i%len(bodies)]); err != nil {
					if runCtx.Err() == nil {
						errOnce.Do(func() { firstErr = err })
					}
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	cpu1, _ := p.CPUSeconds()
	if firstErr != nil {
		return loadResult{}, fmt.Errorf("load test: %w", firstErr)
	}
	return loadResult{
		PromptBytes: size, Streams: streams, Requests: n.Load(), Seconds: secs,
		PickerCPU: max(cpu1-cpu0-idleRate*secs, 0), ClientCPU: proc.SelfCPUSeconds() - self0,
	}, nil
}

// exchange is one request as the gateway runs it, with a three-event
// streamed answer.
func exchange(ctx context.Context, client extprocv3.ExternalProcessorClient, body []byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := client.Process(ctx)
	if err != nil {
		return err
	}
	send := func(r *extprocv3.ProcessingRequest) error { return st.Send(r) }
	if err := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headers(":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw",
			"content-type", "application/json", "content-length", strconv.Itoa(len(body)))}}}); err != nil {
		return err
	}
	const chunk = 16 << 10
	for off := 0; off < len(body); off += chunk {
		end := min(off+chunk, len(body))
		if err := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body[off:end], EndOfStream: end == len(body)}}}); err != nil {
			return err
		}
	}
	r, err := st.Recv()
	if err != nil {
		return err
	}
	if r.GetRequestHeaders() == nil {
		return fmt.Errorf("want a routing reply, got %v", r)
	}
	for got := 0; got < len(body); {
		r, err := st.Recv()
		if err != nil {
			return err
		}
		got += len(r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody())
	}
	if err := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headers(":status", "200", "content-type", "text/event-stream")}}}); err != nil {
		return err
	}
	if _, err := st.Recv(); err != nil {
		return err
	}
	events := []string{sseEvent("Hello"), sseEvent(" world"), "data: [DONE]\n\n"}
	for i, e := range events {
		if err := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: []byte(e), EndOfStream: i == len(events)-1}}}); err != nil {
			return err
		}
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	switch _, err := st.Recv(); {
	case err == nil:
		return errors.New("want the stream to end, got another message")
	case !errors.Is(err, io.EOF):
		return fmt.Errorf("want the stream to end: %w", err)
	}
	return nil
}

func headers(kv ...string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return hm
}

func sseEvent(s string) string {
	return fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", s)
}

// loadBody is a chat body of about size bytes: a tenant's system prompt
// and a conversation of its own.
func loadBody(tenant, conv, size int) []byte {
	half := max(size/2-60, 8)
	b, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "messages": []map[string]string{
		{"role": "system", "content": filler("tenant "+strconv.Itoa(tenant), half)},
		{"role": "user", "content": filler("conversation "+strconv.Itoa(conv), half)},
	}})
	return b
}

func filler(seed string, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(seed)
		b.WriteString(" asks the model about routing. ")
	}
	return b.String()[:n]
}

// picker is a running inferpick process.
type picker struct {
	p     *proc.Process
	grpc  string
	debug string
}

func (pk *picker) stop() { pk.p.Stop(5 * time.Second) }

// startPicker runs the inferpick binary over addrs and waits until it has
// scraped every one.
func startPicker(bin string, addrs []string, policyName string, extra ...string) (*picker, error) {
	ports, err := framework.FreePorts("127.0.0.1", 3)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--static-endpoints", strings.Join(addrs, ","), "--policy", policyName,
		"--secure-serving=false", "--bind-address", "127.0.0.1",
		"--grpc-port", strconv.Itoa(ports[0]), "--grpc-health-port", strconv.Itoa(ports[1]),
		"--metrics-port", strconv.Itoa(ports[2]),
	}, extra...)
	p, err := proc.Start("inferpick", bin, args...)
	if err != nil {
		return nil, err
	}
	pk := &picker{p: p, grpc: "127.0.0.1:" + strconv.Itoa(ports[0]), debug: "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/debug/workers"}
	err = proc.WaitHTTP(p, pk.debug, 30*time.Second, func(r *http.Response) bool {
		var v struct {
			Workers []struct {
				KVBlocks int `json:"kvCacheBlocks"`
			} `json:"workers"`
		}
		if r.StatusCode != http.StatusOK || json.NewDecoder(r.Body).Decode(&v) != nil || len(v.Workers) != len(addrs) {
			return false
		}
		for _, w := range v.Workers {
			if w.KVBlocks == 0 {
				return false
			}
		}
		return true
	})
	if err != nil {
		pk.stop()
		return nil, err
	}
	return pk, nil
}

// metricsFarm serves one /metrics page on many loopback ports, standing in
// for model servers when only their metrics matter.
type metricsFarm struct {
	addrs []string
	srvs  []*http.Server
}

// startOverFarm runs n metrics endpoints serving page and a picker with
// policyName over them; stop ends both.
func startOverFarm(pickerBin, page string, n int, policyName string) (pk *picker, stop func(), err error) {
	farm, err := newMetricsFarm(slices.Repeat([]string{"127.0.0.1:0"}, n), page)
	if err != nil {
		return nil, nil, err
	}
	pk, err = startPicker(pickerBin, farm.addrs, policyName)
	if err != nil {
		farm.close()
		return nil, nil, err
	}
	return pk, func() { pk.stop(); farm.close() }, nil
}

// newMetricsFarm serves page at each of addrs (a port 0 picks a free one).
func newMetricsFarm(addrs []string, page string) (*metricsFarm, error) {
	f := &metricsFarm{}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, page)
	})
	for _, addr := range addrs {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			f.close()
			return nil, fmt.Errorf("metrics farm: %w", err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(lis) }()
		f.srvs = append(f.srvs, srv)
		f.addrs = append(f.addrs, lis.Addr().String())
	}
	return f, nil
}

func (f *metricsFarm) close() {
	for _, s := range f.srvs {
		_ = s.Close()
	}
}

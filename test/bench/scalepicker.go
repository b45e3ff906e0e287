package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferpick/inferpick/picker/extproc"
	"github.com/inferpick/inferpick/picker/observe"
	"github.com/inferpick/inferpick/test/bench/proc"
	"github.com/inferpick/inferpick/test/framework"
)

// clusterPicker is an inferpick process serving an InferencePool of the
// benchmark's API server.
type clusterPicker struct {
	p       *proc.Process
	metrics string // http://host:port
	conn    *grpc.ClientConn
	client  extprocv3.ExternalProcessorClient
	body    []byte
}

// startClusterPicker runs the picker for pool "pool" of ns, scraping once
// an hour (nothing serves metrics), and waits until it is ready.
func startClusterPicker(ctx context.Context, bin, kubeconfig, ns string) (*clusterPicker, error) {
	ports, err := framework.FreePorts("127.0.0.1", 3)
	if err != nil {
		return nil, err
	}
	p, err := proc.Start("inferpick", bin,
		"--kubeconfig", kubeconfig, "--pool-name", "pool", "--pool-namespace", ns,
		"--policy", "cache-aware", "--refresh-metrics-interval", "1h", "--refresh-models-interval", "0",
		"--secure-serving=false", "--metrics-endpoint-auth=false", "--enable-pprof",
		"--bind-address", "127.0.0.1",
		"--grpc-port", strconv.Itoa(ports[0]), "--grpc-health-port", strconv.Itoa(ports[1]),
		"--metrics-port", strconv.Itoa(ports[2]))
	if err != nil {
		return nil, err
	}
	pk := &clusterPicker{p: p, metrics: "http://127.0.0.1:" + strconv.Itoa(ports[2]), body: loadBody(0, 0, 1<<10)}
	if err := proc.WaitHTTP(p, pk.metrics+"/debug/workers", time.Minute, nil); err != nil {
		pk.stop()
		return nil, err
	}
	pk.conn, err = grpc.NewClient("127.0.0.1:"+strconv.Itoa(ports[0]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		pk.stop()
		return nil, fmt.Errorf("picker client: %w", err)
	}
	pk.client = extprocv3.NewExternalProcessorClient(pk.conn)
	return pk, ctx.Err()
}

func (pk *clusterPicker) stop() {
	if pk.conn != nil {
		_ = pk.conn.Close()
	}
	pk.p.Stop(5 * time.Second)
}

// route sends one request, restricted to hint when it is not empty, and
// returns the time from the end of its body to the routing reply and the
// endpoint picked ("" when the picker answered with an error).
func (pk *clusterPicker) route(ctx context.Context, hint string) (time.Duration, string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the picker sees the client go away and releases its guard
	st, err := pk.client.Process(ctx)
	if err != nil {
		return 0, "", err
	}
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headers(":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw",
			"content-type", "application/json", "content-length", strconv.Itoa(len(pk.body)))}}}
	if hint != "" {
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{extproc.SubsetKey: structpb.NewStringValue(hint)}},
		}}
	}
	if err := st.Send(req); err != nil {
		return 0, "", err
	}
	start := time.Now()
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: pk.body, EndOfStream: true}}}); err != nil {
		return 0, "", err
	}
	r, err := st.Recv()
	took := time.Since(start)
	if err != nil {
		return 0, "", err
	}
	for _, h := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == extproc.DestinationHeader {
			dest, _, _ := strings.Cut(string(h.GetHeader().GetRawValue()), ",")
			return took, dest, nil
		}
	}
	return took, "", nil
}

// waitRoutable polls until a request restricted to ip is routed there.
func (pk *clusterPicker) waitRoutable(ctx context.Context, ip string, timeout time.Duration) error {
	want := ip + ":" + strconv.Itoa(scalePort)
	deadline := time.Now().Add(timeout)
	for {
		_, dest, err := pk.route(ctx, want)
		if err == nil && dest == want {
			return nil
		}
		if pk.p.Exited() {
			return fmt.Errorf("picker exited:\n%s", pk.p.Output())
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("routed to %q", dest)
			}
			return fmt.Errorf("%s %w after %v: %w", want, errNotRoutable, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// settle waits until the picker's CPU stops rising (less than 10 ms in a
// 300 ms window, or 10 s at most) and returns its CPU seconds.
func (pk *clusterPicker) settle(ctx context.Context) float64 {
	last, _ := pk.p.CPUSeconds()
	for range 33 {
		select {
		case <-ctx.Done():
			return last
		case <-time.After(300 * time.Millisecond):
		}
		now, _ := pk.p.CPUSeconds()
		if now-last < 0.011 {
			return now
		}
		last = now
	}
	return last
}

// memory returns the picker's live heap right after a collection and its
// resident set, in bytes.
func (pk *clusterPicker) memory(ctx context.Context) (heap, rss int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pk.metrics+"/debug/pprof/heap?gc=1&debug=1", http.NoBody)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			heap, err = strconv.ParseInt(v, 10, 64)
		}
	}
	if err := errors.Join(err, sc.Err()); err != nil {
		return 0, 0, fmt.Errorf("heap profile: %w", err)
	}
	if heap == 0 {
		return 0, 0, errors.New("heap profile: no HeapAlloc")
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pk.p.Pid()) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("VmRSS: %w", err)
			}
			rss = kb << 10
		}
	}
	return heap, rss, nil
}

// waitWorkers polls /debug/workers until the registry holds n workers that
// may be picked; the parked workers of unready pods are not counted.
func (pk *clusterPicker) waitWorkers(ctx context.Context, n int, timeout time.Duration) error {
	return framework.Poll(ctx, timeout, func() error {
		var v observe.WorkersView
		if err := framework.GetJSON(ctx, pk.metrics+"/debug/workers", &v); err != nil {
			return err
		}
		if got := v.Live(); got != n {
			return fmt.Errorf("the picker holds %d workers, want the %d ready pods", got, n)
		}
		return nil
	})
}

// latencies are sorted durations in seconds.
type latencies []float64

func (l latencies) quantile(q float64) float64 {
	if len(l) == 0 {
		return 0
	}
	return l[min(int(q*float64(len(l))), len(l)-1)]
}

// pickLatencies routes one request every 10 ms for d, while background
// (when not nil) runs, and returns the sorted latencies.
func (pk *clusterPicker) pickLatencies(ctx context.Context, d time.Duration, background func(context.Context) error) (latencies, error) {
	// A cancel rather than a deadline, which would travel to the picker as
	// grpc-timeout and might end a stream there before this side notices.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopAt := time.AfterFunc(d, cancel)
	defer stopAt.Stop()
	bg := make(chan error, 1)
	if background != nil {
		go func() { bg <- background(ctx) }()
	} else {
		bg <- nil
	}
	var out latencies
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var err error
	for ctx.Err() == nil {
		var took time.Duration
		var dest string
		took, dest, err = pk.route(ctx, "")
		if err != nil || dest == "" {
			if ctx.Err() != nil {
				err = nil
				break
			}
			err = errors.Join(err, errors.New("a request was not routed"))
			cancel()
			break
		}
		out = append(out, took.Seconds())
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	if berr := <-bg; berr != nil {
		err = errors.Join(err, berr)
	}
	sort.Float64s(out)
	return out, err
}

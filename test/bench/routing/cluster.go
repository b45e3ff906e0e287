// Package routing is the routing benchmark: a time-scaled cluster of vLLM
// simulators behind the gateway stand-in and the inferpick binary, driven
// by workloads, one policy at a time, each run on cold caches.
package routing

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/inferpick/inferpick/picker/health"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/test/bench/proc"
	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// SimSpec is the simulated model server of every pod.
type SimSpec struct {
	Pods          int
	FirstIP       int // pods listen on 127.0.0.FirstIP, FirstIP+1, ...
	Port          int
	TimeScale     float64
	NumGPUBlocks  int
	BlockSize     int
	MaxNumSeqs    int
	PrefillUsTok  float64
	DecodeMsTok   float64
	MaxTokens     int
	ScrapeEvery   time.Duration
	StartupWindow time.Duration
	// LoRAAdapters are registered on every pod (--lora-modules), at most
	// MaxLoRAs of them in a batch and loaded at once, each load costing
	// LoRALoadMs of simulated time.
	LoRAAdapters []string
	MaxLoRAs     int
	LoRALoadMs   float64
	// OffloadBlocks, when not 0, gives every pod an offloading tier of
	// that many blocks behind its GPU pool (vllm-sim --kv-offloading-blocks).
	OffloadBlocks int
	// PickerArgs are more flags for the picker.
	PickerArgs []string
	// Replicas is how many pickers share the pods, each with its own view,
	// behind the gateway's ext_proc cluster; 0 means one.
	Replicas int
	// KVEventsPort, when not 0, is where every pod publishes its KV-cache
	// events, and the pickers subscribe to them (--kv-events-port).
	KVEventsPort int
	// EventsWhenScheduled makes the pods publish a step's events as it
	// starts (vllm-sim --kv-events-when scheduled), not once it has run.
	EventsWhenScheduled bool
	// KVEventsReplayPort, when not 0 (with KVEventsPort), is where every pod
	// replays the KV-cache event batches it keeps, and the pickers read them
	// back each time they subscribe (--kv-events-replay-port).
	KVEventsReplayPort int
	// HealthCheck makes the gateway check each picker's readiness, so that
	// a replica that drains or starts takes no stream while another is
	// ready, as a rolling restart behind Envoy needs.
	HealthCheck bool
	// ScaleTransport counts a request's wall time until the pod's response
	// headers in simulated time like the rest of its TTFT. By default it
	// counts at its wall duration, being this host's work rather than the
	// engines' (driver.simulated); runs whose picker holds requests in a
	// queue before routing them (flow control), a wait the engines cause,
	// scale it.
	ScaleTransport bool
}

// Args returns the vllm-sim flags of pod i.
func (s SimSpec) Args(i int) []string {
	args := []string{
		"--host", s.host(i), "--port", strconv.Itoa(s.Port),
		"--time-scale", fmt.Sprint(s.TimeScale),
		"--num-gpu-blocks", strconv.Itoa(s.NumGPUBlocks),
		"--block-size", strconv.Itoa(s.BlockSize),
		"--max-num-seqs", strconv.Itoa(s.MaxNumSeqs),
		"--prefill-us-per-token", fmt.Sprint(s.PrefillUsTok),
		"--decode-ms-per-token", fmt.Sprint(s.DecodeMsTok),
		"--seed", strconv.Itoa(i + 1),
	}
	if s.OffloadBlocks > 0 {
		args = append(args, "--kv-offloading-blocks", strconv.Itoa(s.OffloadBlocks))
	}
	if len(s.LoRAAdapters) > 0 {
		modules := make([]string, len(s.LoRAAdapters))
		for j, a := range s.LoRAAdapters {
			modules[j] = a + "=/adapters/" + a
		}
		args = append(args, "--lora-modules", strings.Join(modules, " "),
			"--max-loras", strconv.Itoa(s.MaxLoRAs), "--max-cpu-loras", strconv.Itoa(s.MaxLoRAs),
			"--lora-load-ms", fmt.Sprint(s.LoRALoadMs))
	}
	if s.KVEventsPort != 0 {
		replay := ""
		if s.KVEventsReplayPort != 0 {
			replay = fmt.Sprintf(`,"replay_endpoint":"tcp://*:%d"`, s.KVEventsReplayPort)
		}
		args = append(args, "--kv-events-config",
			fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:%d"%s}`, s.KVEventsPort, replay))
		if s.EventsWhenScheduled {
			args = append(args, "--kv-events-when", "scheduled")
		}
	}
	return args
}

func (s SimSpec) host(i int) string { return "127.0.0." + strconv.Itoa(s.FirstIP+i) }

// Addr returns pod i's ip:port.
func (s SimSpec) Addr(i int) string { return net.JoinHostPort(s.host(i), strconv.Itoa(s.Port)) }

// Binaries are the programs a cluster runs: Upstream is the upstream
// endpoint picker (hack/peers.sh), for policies marked Upstream.
type Binaries struct {
	Sim, Picker, Upstream string
}

// Cluster is one cold cluster: simulators, the pickers and the gateway.
type Cluster struct {
	spec    SimSpec
	sims    []*proc.Process
	pickers []*pickerProc
	gw      *gateway.Gateway
	gwAddr  string
	debug   string // the first picker's /debug/workers
	stopGW  context.CancelFunc
	gwDone  chan struct{}
	workdir string
	log     recordLog
	api     *APIServer // for the upstream picker (StartUpstream)
}

// pickerProc is one picker replica.
type pickerProc struct {
	p        *proc.Process
	name     string
	bin      string
	args     []string
	grpcAddr string
	health   string // its gRPC health address
	debug    string
	workers  int // the pods it must have scraped to be ready
}

// Start brings up spec's simulators and a picker running cfg, and a
// gateway in front of them; it returns once the picker has scraped every pod.
// The cluster outlives ctx's cancellation: only Stop ends it.
func Start(ctx context.Context, bins Binaries, spec SimSpec, cfg policy.Config, workdir string) (c *Cluster, err error) {
	c = &Cluster{spec: spec, workdir: workdir}
	started := c // the error returns below set c to nil
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	addrs, err := c.startSims(bins.Sim)
	if err != nil {
		return nil, err
	}
	var grpcAddrs, healthAddrs []string
	if cfg.CacheAware.Replicas == 0 {
		cfg.CacheAware.Replicas = max(spec.Replicas, 1) // as the chart's flags tell a deployed picker
	}
	for i := range max(spec.Replicas, 1) {
		p, err := c.startPicker(bins.Picker, addrs, cfg, i)
		c.pickers = append(c.pickers, p)
		if err != nil {
			return nil, err
		}
		grpcAddrs = append(grpcAddrs, p.grpcAddr)
		healthAddrs = append(healthAddrs, p.health)
	}
	c.debug = c.pickers[0].debug
	var opts []gateway.Option
	if spec.HealthCheck {
		pc := gateway.DefaultPickerCluster
		pc.HealthCheck = &gateway.HealthCheck{Addrs: healthAddrs, Service: health.Readiness, Interval: 50 * time.Millisecond}
		opts = append(opts, gateway.WithPickerCluster(pc))
	}
	if err := c.startGateway(ctx, grpcAddrs, opts...); err != nil {
		return nil, err
	}
	return c, nil
}

// StartUpstream is Start with the upstream endpoint picker (bins.Upstream,
// its default configuration) in place of inferpick. That picker reads its
// pods from an API server, so the cluster runs one, with InferencePool
// "pool" over a Ready pod for each simulator. It has no /debug/workers:
// the results have no load samples.
func StartUpstream(ctx context.Context, bins Binaries, spec SimSpec, workdir string) (c *Cluster, err error) {
	c = &Cluster{spec: spec, workdir: workdir}
	started := c
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	if _, err := c.startSims(bins.Sim); err != nil {
		return nil, err
	}
	if c.api, err = StartAPIServer(ctx); err != nil {
		return nil, err
	}
	ns, err := c.api.Pool(ctx, "routing", int32(spec.Port))
	if err != nil {
		return nil, err
	}
	for i := range spec.Pods {
		if err := c.api.ReadyPod(ctx, ns, "vllm-"+strconv.Itoa(i), spec.host(i)); err != nil {
			return nil, err
		}
	}
	p, err := c.startUpstream(bins.Upstream, ns)
	c.pickers = append(c.pickers, p)
	if err != nil {
		return nil, err
	}
	if err := c.startGateway(ctx, []string{p.grpcAddr}); err != nil {
		return nil, err
	}
	return c, nil
}

// startSims starts a simulator per pod and waits until each answers.
func (c *Cluster) startSims(bin string) ([]string, error) {
	addrs := make([]string, c.spec.Pods)
	for i := range c.spec.Pods {
		p, err := proc.Start("vllm-sim "+c.spec.Addr(i), bin, c.spec.Args(i)...)
		if err != nil {
			return nil, err
		}
		c.sims = append(c.sims, p)
		addrs[i] = c.spec.Addr(i)
	}
	for i, p := range c.sims {
		if err := proc.WaitHTTP(p, "http://"+addrs[i]+"/sim/stats", c.spec.StartupWindow, nil); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

// startGateway serves the gateway stand-in in front of the pickers.
func (c *Cluster) startGateway(ctx context.Context, grpcAddrs []string, opts ...gateway.Option) error {
	var err error
	c.gw, err = gateway.NewCluster(grpcAddrs, append([]gateway.Option{gateway.WithMessageTimeout(0), gateway.WithRecorder(c.record)}, opts...)...) //nolint:contextcheck // the gateway lives until Stop closes it, ctx only bounds its start.
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("gateway listener: %w", err)
	}
	c.gwAddr = lis.Addr().String()
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.stopGW, c.gwDone = cancel, make(chan struct{})
	go func() {
		defer close(c.gwDone)
		_ = c.gw.Serve(serveCtx, lis)
	}()
	return nil
}

// startUpstream runs the upstream endpoint picker for InferencePool "pool"
// of ns, scraping as often as inferpick does here, and waits until it
// reports every pod of the pool ready.
func (c *Cluster) startUpstream(bin, ns string) (*pickerProc, error) {
	ports, err := framework.FreePorts("127.0.0.1", 3)
	if err != nil {
		return nil, err
	}
	pp := &pickerProc{grpcAddr: "127.0.0.1:" + strconv.Itoa(ports[0])}
	metrics := "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metrics"
	pp.p, err = proc.StartEnv("upstream picker", bin, []string{"KUBECONFIG=" + c.api.Kubeconfig},
		"--pool-name", "pool", "--pool-namespace", ns,
		"--secure-serving=false", "--metrics-endpoint-auth=false",
		"--grpc-port", strconv.Itoa(ports[0]), "--grpc-health-port", strconv.Itoa(ports[1]),
		"--metrics-port", strconv.Itoa(ports[2]),
		"--refresh-metrics-interval", c.spec.ScrapeEvery.String(),
		"--refresh-prometheus-metrics-interval", "200ms")
	if err != nil {
		return nil, err
	}
	want := fmt.Sprintf("inference_pool_ready_pods{name=%q} %d", "pool", c.spec.Pods)
	return pp, proc.WaitHTTP(pp.p, metrics, 2*time.Minute, func(r *http.Response) bool {
		b, err := io.ReadAll(r.Body)
		return err == nil && r.StatusCode == http.StatusOK && strings.Contains(string(b), want)
	})
}

func (c *Cluster) startPicker(bin string, addrs []string, cfg policy.Config, replica int) (*pickerProc, error) {
	ports, err := framework.FreePorts("127.0.0.1", 3)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(map[string]any{"policy": cfg})
	if err != nil {
		return nil, fmt.Errorf("policy config: %w", err)
	}
	file := filepath.Join(c.workdir, "policy.yaml")
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		return nil, fmt.Errorf("policy config: %w", err)
	}
	pp := &pickerProc{
		name:     "inferpick " + strconv.Itoa(replica),
		bin:      bin,
		grpcAddr: "127.0.0.1:" + strconv.Itoa(ports[0]),
		health:   "127.0.0.1:" + strconv.Itoa(ports[1]),
		debug:    "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/debug/workers",
		workers:  len(addrs),
	}
	pp.args = []string{
		"--static-endpoints", strings.Join(addrs, ","),
		"--config-file", file,
		"--secure-serving=false", "--bind-address", "127.0.0.1",
		"--grpc-port", strconv.Itoa(ports[0]), "--grpc-health-port", strconv.Itoa(ports[1]),
		"--metrics-port", strconv.Itoa(ports[2]),
		"--refresh-metrics-interval", c.spec.ScrapeEvery.String(),
	}
	if c.spec.KVEventsPort != 0 {
		pp.args = append(pp.args, "--kv-events-port", strconv.Itoa(c.spec.KVEventsPort))
		if c.spec.KVEventsReplayPort != 0 {
			pp.args = append(pp.args, "--kv-events-replay-port", strconv.Itoa(c.spec.KVEventsReplayPort))
		}
	}
	pp.args = append(pp.args, c.spec.PickerArgs...)
	return pp, c.launch(pp)
}

// launch starts pp's process and waits until it is ready: every worker
// shows a scrape (the cache-aware policy then knows each pod's KV
// capacity).
func (c *Cluster) launch(pp *pickerProc) error {
	var err error
	pp.p, err = proc.Start(pp.name, pp.bin, pp.args...)
	if err != nil {
		return err
	}
	return proc.WaitHTTP(pp.p, pp.debug, c.spec.StartupWindow, func(r *http.Response) bool {
		var v workersView
		if r.StatusCode != http.StatusOK || json.NewDecoder(r.Body).Decode(&v) != nil {
			return false
		}
		if !v.Synced || len(v.Workers) != pp.workers {
			return false
		}
		for _, w := range v.Workers {
			if w.KVBlocks == 0 {
				return false
			}
		}
		return true
	})
}

// Stop ends the gateway, the picker and the simulators.
func (c *Cluster) Stop() {
	if c.stopGW != nil {
		c.stopGW()
		<-c.gwDone
	}
	if c.gw != nil {
		_ = c.gw.Close()
	}
	for _, p := range c.pickers {
		if p != nil && p.p != nil {
			p.p.Stop(5 * time.Second)
		}
	}
	for _, s := range c.sims {
		s.Stop(5 * time.Second)
	}
	if c.api != nil {
		c.api.Stop()
	}
}

// workersView is the part of the picker's /debug/workers the benchmark reads.
type workersView struct {
	Synced  bool `json:"synced"`
	Workers []struct {
		Address  string `json:"address"`
		Load     int64  `json:"load"`
		KVBlocks int    `json:"kvCacheBlocks"`
	} `json:"workers"`
}

// simStats is the part of a simulator's /sim/stats the benchmark reads.
type simStats struct {
	Requests     int64   `json:"requests"`
	Finished     int64   `json:"finished"`
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	Offloaded    int64   `json:"offloaded_tokens"`
	MeanTTFT     float64 `json:"mean_simulated_ttft_seconds"`
	LoRALoads    int64   `json:"lora_loads"`
}

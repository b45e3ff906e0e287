package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/test/bench/proc"
	"github.com/inferpick/inferpick/test/bench/routing"
	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// The peers benchmark (`make bench-peers`, opt-in) runs the ext_proc load
// test against inferpick and against the upstream endpoint picker
// (hack/peers.sh builds it from the module proxy), both running and taking
// the load in turn, each serving the same InferencePool of a real API server: 8 Ready pods at
// 127.1.0.1–8 whose port peersPort serves a simulator's /metrics page.
const (
	peersPods = 8
	peersPort = 8000
)

// peersResult is the peers benchmark: the load test of each picker, and
// routing runs of inferpick's policies beside the upstream picker.
type peersResult struct {
	Load    []peerLoad
	Routing []*routing.Result // routing benchmark workloads
	Repro   []*routing.Result // the tight-cache workload
}

// peerPolicies are the routing runs of the peers benchmark: inferpick's
// default policy, the in-tree weighted scorer, and the upstream picker.
var peerPolicies = []routing.Policy{
	{Label: "inferpick cache-aware", Config: policy.Config{Name: policy.CacheAware}},
	{Label: "inferpick weighted-scorer", Config: policy.Config{Name: policy.WeightedScorer}},
	{Label: "upstream EPP", Upstream: true},
}

// peerWorkloads are the routing benchmark's workloads the peers benchmark
// runs.
const peerWorkloads = "shared-prefix@18,multi-turn"

// peerLoad is one picker's load test.
type peerLoad struct {
	Picker string
	Args   string
	// Load is the median round of each of loadShapes.
	Load []loadResult
}

func peersBench(ctx context.Context, bins routing.Binaries, page string, quick bool) (*peersResult, error) {
	out, err := exec.CommandContext(ctx, "hack/peers.sh").Output()
	if err != nil {
		return nil, fmt.Errorf("hack/peers.sh: %w", err)
	}
	bins.Upstream = strings.TrimSpace(string(out))
	res := &peersResult{}
	if res.Load, err = peersLoad(ctx, bins.Picker, bins.Upstream, page, quick); err != nil {
		return nil, err
	}
	pols := slices.Clone(peerPolicies)
	for i := range pols {
		if pols[i].Upstream {
			pols[i].Label += " " + eppVersion(bins.Upstream)
		}
	}
	log.Print("peers: routing benchmark workloads")
	if res.Routing, err = routing.Suite(ctx, bins, simSpec(), pols, keepWorkloads(workloads(quick), peerWorkloads), deadline); err != nil {
		return nil, err
	}
	log.Print("peers: tight-cache workload")
	if res.Repro, err = routing.Suite(ctx, bins, reproSpec(), pols, []*routing.Workload{reproWorkload()}, deadline); err != nil {
		return nil, err
	}
	return res, nil
}

// peersLoad runs the load test through inferpick and the upstream picker.
func peersLoad(ctx context.Context, pickerBin, epp, page string, quick bool) ([]peerLoad, error) {
	bc, err := routing.StartAPIServer(ctx)
	if err != nil {
		return nil, err
	}
	defer bc.Stop()
	ns, err := bc.Pool(ctx, "peers", peersPort)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, peersPods)
	for i := range addrs {
		addrs[i] = net.JoinHostPort(podIP(1, i+1), strconv.Itoa(peersPort))
	}
	farm, err := newMetricsFarm(addrs, page)
	if err != nil {
		return nil, err
	}
	defer farm.close()
	for i := range peersPods {
		if err := bc.ReadyPod(ctx, ns, podName(1, i+1), podIP(1, i+1)); err != nil {
			return nil, err
		}
	}
	kube := []string{"KUBECONFIG=" + bc.Kubeconfig}
	pool := []string{"--pool-name", "pool", "--pool-namespace", ns, "--secure-serving=false", "--metrics-endpoint-auth=false"}
	specs := []struct {
		name, bin string
		args      []string
	}{
		{"inferpick", pickerBin, append([]string{"--kubeconfig", bc.Kubeconfig, "--policy", "cache-aware", "--bind-address", "127.0.0.1"}, pool...)},
		{"upstream EPP " + eppVersion(epp), epp, pool},
	}
	dur, rounds := loadRounds(quick)
	// Both run at once, each scraping the pods, and take the load in turn,
	// round by round, so that the machine's drift falls on both alike.
	var running []*peerPicker
	defer func() {
		for _, pk := range running {
			pk.stop()
		}
	}()
	res := make([]peerLoad, len(specs))
	for i, sp := range specs {
		pk, err := startPeer(ctx, sp.name, sp.bin, kube, sp.args, quick)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sp.name, err)
		}
		running = append(running, pk)
		args := strings.Join(sp.args, " ")
		args = strings.ReplaceAll(strings.ReplaceAll(args, bc.Kubeconfig, "$KUBECONFIG"), ns, "$NAMESPACE")
		res[i] = peerLoad{Picker: sp.name, Args: args}
	}
	shapes := loadShapes()
	meds, err := medianRounds(rounds, len(shapes)*len(running), func(i int) (loadResult, error) {
		sh, pk := shapes[i/len(running)], running[i%len(running)]
		r, err := loadOnce(ctx, pk.client, pk.p, sh.size, sh.streams, dur, pk.idle)
		if err != nil {
			return r, fmt.Errorf("%s: %w", pk.name, err)
		}
		return r, nil
	})
	if err != nil {
		return nil, err
	}
	for i, r := range meds {
		res[i%len(running)].Load = append(res[i%len(running)].Load, r)
	}
	return res, nil
}

// peerPicker is a running picker of the peers benchmark.
type peerPicker struct {
	name   string
	p      *proc.Process
	conn   *grpc.ClientConn
	client extprocv3.ExternalProcessorClient
	idle   float64 // CPU seconds per second with no requests (scraping)
}

func (pk *peerPicker) stop() {
	if pk.conn != nil {
		_ = pk.conn.Close()
	}
	pk.p.Stop(5 * time.Second)
}

// startPeer starts one picker on free ports, waits until it routes, and
// measures its idle rate.
func startPeer(ctx context.Context, name, bin string, env, args []string, quick bool) (*peerPicker, error) {
	ports, err := framework.FreePorts("127.0.0.1", 3)
	if err != nil {
		return nil, err
	}
	args = append(slices.Clone(args), "--grpc-port", strconv.Itoa(ports[0]),
		"--grpc-health-port", strconv.Itoa(ports[1]), "--metrics-port", strconv.Itoa(ports[2]))
	p, err := proc.StartEnv(name, bin, env, args...)
	if err != nil {
		return nil, err
	}
	pk := &peerPicker{name: name, p: p}
	ok := false
	defer func() {
		if !ok {
			pk.stop()
		}
	}()
	pk.conn, err = grpc.NewClient("127.0.0.1:"+strconv.Itoa(ports[0]),
		append(gateway.EnvoyDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, err
	}
	pk.client = extprocv3.NewExternalProcessorClient(pk.conn)
	// Routable: a request gets a destination, so the picker has seen the
	// pool, its pods and their metrics.
	body := loadBody(0, 0, 1<<10)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := exchange(ctx, pk.client, body)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not routing after 2 minutes (log %s): %w", p.LogPath(), err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	idle := 2 * time.Second
	if quick {
		idle = time.Second
	}
	if pk.idle, err = p.IdleRate(ctx, idle); err != nil {
		return nil, err
	}
	ok = true
	return pk, nil
}

// eppVersion is the version in the upstream picker's cached file name.
func eppVersion(path string) string {
	_, v, _ := strings.Cut(path[strings.LastIndex(path, "/")+1:], "epp-")
	return v
}

// peersMarkdown reports the peers benchmark.
func peersMarkdown(pr *peersResult) string {
	if pr == nil || len(pr.Load) == 0 {
		return ""
	}
	rs := pr.Load
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Peers: the same ext_proc load test through the upstream endpoint picker\n\n")
	w("Each picker serves InferencePool `pool` of a real API server (envtest) over %d Ready pods whose port %d serves\n", peersPods, peersPort)
	w("a simulator's /metrics page, with its default configuration and scrape interval. Both run at once and take\n")
	w("the ext_proc load test in turn (8 and 32 concurrent streams; each exchange: request headers, the body in\n")
	w("16 KB chunks, the routing reply and the body, response headers, three SSE chunks), %s of each\n", plural(rs[0].Load[0].Rounds, "round"))
	w("shape; the table shows each picker's median round. Picker CPU per request is its time (the sum of its threads' `/proc/<pid>/task/*/schedstat`) less its idle\n")
	w("(scraping) rate measured before.\n\n")
	w("| prompt | streams |")
	for _, r := range rs {
		w(" %s CPU per request | req/s (wall) |", r.Picker)
	}
	w(" %s's lead |\n|---|---:|", rs[0].Picker)
	for range rs {
		w("---:|---:|")
	}
	w("---:|\n")
	for i, l := range rs[0].Load {
		w("| %d KB | %d |", l.PromptBytes>>10, l.Streams)
		for _, r := range rs {
			w(" %s | %.0f |", human(r.Load[i].cpuPerRequest()*1e9), r.Load[i].rps())
		}
		lead := "–"
		if len(rs) > 1 && l.cpuPerRequest() > 0 {
			lead = fmt.Sprintf("%.1f×", rs[1].Load[i].cpuPerRequest()/l.cpuPerRequest())
		}
		w(" %s |\n", lead)
	}
	w("\nArguments besides the ports (each reads the API server from `$KUBECONFIG`):\n\n")
	for _, r := range rs {
		w("- %s: `%s`\n", r.Picker, r.Args)
	}
	w("\n")
	if len(pr.Routing) > 0 {
		w("### Routing\n\n")
		w("The routing benchmark's cluster (BENCHMARKS.md: %d `vllm-sim` pods behind the gateway stand-in, cold\n", simSpec().Pods)
		w("caches for every run), with the upstream picker in inferpick's place: it reads the pods from an API server,\n")
		w("scrapes them as often as inferpick does there, and runs its default configuration. **hit** is the servers'\n")
		w("own cached / prompt tokens; TTFT in simulated seconds, measured by the client as in BENCHMARKS.md (the time until\n")
		w("the pod's response headers, which includes the pick, as it was; the engine's time after it scaled).\n\n")
		peersRoutingTable(w, pr.Routing)
	}
	if len(pr.Repro) > 0 {
		s := reproSpec()
		w("### Tight cache, slow prefill\n\n")
		w("The tight-cache setting (%d KV blocks × %d tokens per pod, prefill %g ms a token, %d sequences; see BENCHMARKS.md).\n\n",
			s.NumGPUBlocks, s.BlockSize, s.PrefillUsTok/1000, s.MaxNumSeqs)
		peersRoutingTable(w, pr.Repro)
	}
	return b.String()
}

func peersRoutingTable(w func(string, ...any), rs []*routing.Result) {
	w("| workload | picker | ok | hit | oracle | TTFT p50 | p90 | p99 |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		w("| %s | %s | %d/%d | %.3f | %.3f | %.3f | %.3f | %.3f |\n", r.Workload, r.Policy, r.OK, r.Sent, r.HitRate, r.Oracle,
			r.Quantile(0.5), r.Quantile(0.9), r.Quantile(0.99))
	}
	w("\n")
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferpick/inferpick/test/bench/proc"
	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// The peers benchmark (`make bench-peers`, opt-in) runs the ext_proc load
// test against inferpick and against the upstream endpoint picker
// (hack/peers.sh builds it from the module proxy), one after the other, each
// serving the same InferencePool of a real API server: 8 Ready pods at
// 127.1.0.1–8 whose port peersPort serves a simulator's /metrics page.
const (
	peersPods = 8
	peersPort = 8000
)

// peerLoad is one picker's load test.
type peerLoad struct {
	Picker string
	Args   string
	// Load is the run of median CPU per request at each body size, of
	// Rounds.
	Load   []loadResult
	Rounds int
}

func peersBench(ctx context.Context, pickerBin, page string, quick bool) ([]peerLoad, error) {
	out, err := exec.CommandContext(ctx, "hack/peers.sh").Output()
	if err != nil {
		return nil, fmt.Errorf("hack/peers.sh: %w", err)
	}
	epp := strings.TrimSpace(string(out))
	bc, err := startBenchCluster(ctx)
	if err != nil {
		return nil, err
	}
	defer bc.stop()
	ns, err := bc.pool(ctx, "peers", peersPort)
	if err != nil {
		return nil, err
	}
	fleet := newPodFleet(bc.c, ns)
	var pages []*http.Server
	defer func() {
		for _, srv := range pages {
			_ = srv.Close()
		}
	}()
	for i := range peersPods {
		ip := podIP(1, i+1)
		lis, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(peersPort)))
		if err != nil {
			return nil, fmt.Errorf("metrics page at %s: %w", ip, err)
		}
		srv := &http.Server{Handler: metricsPage(page), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(lis) }()
		pages = append(pages, srv)
		if err := fleet.start(ctx, podName(1, i+1), ip); err != nil {
			return nil, err
		}
	}
	kube := []string{"KUBECONFIG=" + bc.kubeconfig}
	pool := []string{"--pool-name", "pool", "--pool-namespace", ns, "--secure-serving=false", "--metrics-endpoint-auth=false"}
	specs := []struct {
		name, bin string
		args      []string
	}{
		{"inferpick", pickerBin, append([]string{"--kubeconfig", bc.kubeconfig, "--policy", "cache-aware", "--bind-address", "127.0.0.1"}, pool...)},
		{"upstream EPP " + eppVersion(epp), epp, pool},
	}
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
		args = strings.ReplaceAll(strings.ReplaceAll(args, bc.kubeconfig, "$KUBECONFIG"), ns, "$NAMESPACE")
		res[i] = peerLoad{Picker: sp.name, Args: args}
	}
	dur, rounds := 8*time.Second, 3
	if quick {
		dur, rounds = 2*time.Second, 1
	}
	sizes := []int{1 << 10, 32 << 10, 400 << 10}
	runs := make([][][]loadResult, len(specs)) // picker, size, round
	for i := range runs {
		runs[i] = make([][]loadResult, len(sizes))
	}
	for range rounds {
		for s, size := range sizes {
			for i, pk := range running {
				r, err := loadOnce(ctx, pk.client, pk.p, size, 32, dur, pk.idle)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", pk.name, err)
				}
				runs[i][s] = append(runs[i][s], r)
			}
		}
	}
	for i := range res {
		for s := range sizes {
			rs := runs[i][s]
			slices.SortFunc(rs, func(a, b loadResult) int { return cmp.Compare(a.cpuPerRequest(), b.cpuPerRequest()) })
			res[i].Load = append(res[i].Load, rs[len(rs)/2])
			res[i].Rounds = len(rs)
		}
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
	c0, _ := p.CPUSeconds()
	time.Sleep(idle)
	c1, _ := p.CPUSeconds()
	pk.idle = (c1 - c0) / idle.Seconds()
	ok = true
	return pk, nil
}

// eppVersion is the version in the upstream picker's cached file name.
func eppVersion(path string) string {
	_, v, _ := strings.Cut(path[strings.LastIndex(path, "/")+1:], "epp-")
	return v
}

func metricsPage(page string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(page))
	})
}

// peersMarkdown reports the peers benchmark.
func peersMarkdown(rs []peerLoad) string {
	if len(rs) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Peers: the same ext_proc load test through the upstream endpoint picker\n\n")
	w("Each picker serves InferencePool `pool` of a real API server (envtest) over %d Ready pods whose port %d serves\n", peersPods, peersPort)
	w("a simulator's /metrics page, with its default configuration and scrape interval. Both run at once and take\n")
	w("the ext_proc load test in turn (32 streams, each exchange: request headers, the body in 16 KB chunks, the\n")
	w("routing reply and the body, response headers, three SSE chunks), %s of each body size; the table\n", plural(rs[0].Rounds, "round"))
	w("shows each picker's median round. Picker CPU per request is its `/proc/<pid>/stat` time less its idle\n")
	w("(scraping) rate measured before.\n\n")
	w("| prompt |")
	for _, r := range rs {
		w(" %s CPU per request | req/s (wall) |", r.Picker)
	}
	w(" %s's lead |\n|---|", rs[0].Picker)
	for range rs {
		w("---:|---:|")
	}
	w("---:|\n")
	for i, l := range rs[0].Load {
		w("| %d KB |", l.PromptBytes>>10)
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
	return b.String()
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

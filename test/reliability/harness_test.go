package reliability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/inferpick/inferpick/controllers"
	"github.com/inferpick/inferpick/picker/observe"
	"github.com/inferpick/inferpick/test/gateway"
	"github.com/inferpick/inferpick/test/integration/framework"
)

// bins holds the binaries TestMain builds once for the whole suite.
var bins struct{ picker, sim string }

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestMain builds inferpick and vllm-sim (with the race detector when
// RELIABILITY_RACE=1) and runs the suite against those processes.
func TestMain(m *testing.M) {
	crlog.SetLogger(logr.Discard()) // envtest logs through controller-runtime
	dir, err := os.MkdirTemp("", "inferpick-reliability-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.picker, bins.sim = filepath.Join(dir, "inferpick"), filepath.Join(dir, "vllm-sim")
	for out, pkg := range map[string]string{bins.picker: "./cmd/inferpick", bins.sim: "./cmd/vllm-sim"} {
		args := []string{"build", "-o", out}
		if os.Getenv("RELIABILITY_RACE") == "1" {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = repoRoot(), os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	shared.stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// ---- processes ----

// proc is a child process whose combined output is kept in memory.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Output returns everything the process wrote so far.
func (p *proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startProc runs bin with args; the test's cleanup stops it and prints its
// output's tail when the test failed.
func startProc(t testing.TB, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop(t)
		if t.Failed() {
			out := p.Output()
			if len(out) > 8000 {
				out = "...\n" + out[len(out)-8000:]
			}
			t.Logf("output of %s:\n%s", name, out)
		}
	})
	return p
}

// Exited reports whether the process has ended.
func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits, killing the process after 20 s.
func (p *proc) Stop(t testing.TB) {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not stop within 20s of SIGTERM", p.name)
	}
}

// Kill ends the process with SIGKILL and waits for it.
func (p *proc) Kill() {
	if !p.Exited() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// ---- polling ----

// eventually polls f until it returns nil, failing the test with f's last
// error after timeout.
func eventually(t testing.TB, timeout time.Duration, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		err := f()
		if err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %s: %v", timeout, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// freePort returns a TCP port free on 127.0.0.1 at the time of the call.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// freePortOn returns a port free on every one of hosts.
func freePortOn(t testing.TB, hosts ...string) int {
	t.Helper()
	for range 50 {
		port := freePort(t)
		ok := true
		for _, h := range hosts {
			l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatalf("no port free on all of %v", hosts)
	return 0
}

// ---- model servers ----

// sim is a vllm-sim process.
type sim struct {
	*proc
	host string
	addr string // ip:port
}

// simArgs are the defaults of the suite's simulators: fast, 16 output
// tokens of 2 ms each.
var simArgs = []string{"--time-scale", "0.1", "--default-max-tokens", "16"}

// startSim runs a simulator on host:port (0: any port) and waits for its
// announce line.
func startSim(t testing.TB, host string, port int, extra ...string) *sim {
	t.Helper()
	args := append([]string{"--host", host, "--port", strconv.Itoa(port)}, simArgs...)
	p := startProc(t, "vllm-sim "+host, bins.sim, append(args, extra...)...)
	s := &sim{proc: p, host: host}
	eventually(t, 30*time.Second, func() error {
		out := p.Output()
		i := strings.Index(out, "listening on http://")
		if i < 0 {
			if p.Exited() {
				t.Fatalf("vllm-sim on %s exited:\n%s", host, out)
			}
			return fmt.Errorf("vllm-sim on %s not listening yet", host)
		}
		line, _, _ := strings.Cut(out[i+len("listening on http://"):], "\n")
		s.addr = strings.TrimSpace(line)
		return nil
	})
	return s
}

// simStats is the part of GET /sim/stats the suite reads.
type simStats struct {
	Requests int64 `json:"requests"`
	Finished int64 `json:"finished"`
	Aborted  int64 `json:"aborted"`
	Running  int   `json:"running"`
	Waiting  int   `json:"waiting"`
}

func (s *sim) Stats() (simStats, error) {
	var st simStats
	err := getJSON("http://"+s.addr+"/sim/stats", &st)
	return st, err
}

// SetFaults patches the simulator's faults (fields of its faults JSON).
func (s *sim) SetFaults(t testing.TB, patch map[string]any) {
	t.Helper()
	b, _ := json.Marshal(patch)
	resp, err := http.Post("http://"+s.addr+"/sim/faults", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("set faults on %s: %v", s.addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("set faults on %s: %s: %s", s.addr, resp.Status, body)
	}
}

func getJSON(url string, v any) error {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// ---- the picker ----

// picker is an inferpick process with its ports on 127.0.0.1.
type picker struct {
	*proc
	args                  []string
	grpc, health, metrics int
}

// startPicker runs inferpick in plain gRPC with args added (mode flags
// such as --static-endpoints among them).
func startPicker(t testing.TB, args ...string) *picker {
	t.Helper()
	p := &picker{grpc: freePort(t), health: freePort(t), metrics: freePort(t), args: args}
	p.start(t)
	return p
}

func (p *picker) start(t testing.TB) {
	t.Helper()
	args := []string{
		"--bind-address", "127.0.0.1",
		"--grpc-port", strconv.Itoa(p.grpc),
		"--grpc-health-port", strconv.Itoa(p.health),
		"--metrics-port", strconv.Itoa(p.metrics),
		"--secure-serving=false",
		"--drain-timeout", "2s",
	}
	args = append(args, p.args...)
	p.proc = startProc(t, "inferpick", bins.picker, args...)
}

// Restart stops the process (SIGKILL when kill) and starts a new one with
// the same flags and ports.
func (p *picker) Restart(t testing.TB, kill bool) {
	t.Helper()
	if kill {
		p.Kill()
	} else {
		p.Stop(t)
	}
	p.start(t)
}

// Addr is the ext_proc address.
func (p *picker) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.grpc) }

// Workers reads /debug/workers (plain HTTP on the metrics port).
func (p *picker) Workers() (observe.WorkersView, error) {
	var v observe.WorkersView
	err := getJSON("http://127.0.0.1:"+strconv.Itoa(p.metrics)+"/debug/workers", &v)
	return v, err
}

// Metrics reads the Prometheus page of the metrics port.
func (p *picker) Metrics() (promPage, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://127.0.0.1:" + strconv.Itoa(p.metrics) + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseProm(resp.Body)
}

// Ready asks the gRPC health service for service.
func (p *picker) Serving(ctx context.Context, service string) bool {
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(p.health), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// WaitWorkers waits until the registry is synced and lists n workers.
func (p *picker) WaitWorkers(t testing.TB, n int) observe.WorkersView {
	t.Helper()
	var v observe.WorkersView
	eventually(t, 30*time.Second, func() error {
		var err error
		if v, err = p.Workers(); err != nil {
			return err
		}
		if !v.Synced || len(v.Workers) != n {
			return fmt.Errorf("synced=%v with %d workers, want %d", v.Synced, len(v.Workers), n)
		}
		return nil
	})
	return v
}

// WaitIdle waits until every worker's load, prefill and decode are 0 and
// returns how long that took.
func (p *picker) WaitIdle(t testing.TB, timeout time.Duration) time.Duration {
	t.Helper()
	return eventually(t, timeout, func() error {
		v, err := p.Workers()
		if err != nil {
			return err
		}
		for i := range v.Workers {
			w := &v.Workers[i]
			if w.Load != 0 || w.Prefill != 0 || w.Decode != 0 {
				return fmt.Errorf("worker %s holds load %d (prefill %d, decode %d)", w.Address, w.Load, w.Prefill, w.Decode)
			}
		}
		return nil
	})
}

// promPage is a parsed Prometheus text page: one sample per line.
type promPage []promSample

type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

func parseProm(r io.Reader) (promPage, error) {
	var page promPage
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		s := promSample{labels: map[string]string{}}
		var rest string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			s.name, rest = line[:i], line[j+1:]
			for kv := range strings.SplitSeq(line[i+1:j], ",") {
				k, v, ok := strings.Cut(kv, "=")
				if ok {
					s.labels[k] = strings.Trim(v, `"`)
				}
			}
		} else {
			s.name, rest, _ = strings.Cut(line, " ")
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		s.value = v
		page = append(page, s)
	}
	return page, sc.Err()
}

// Sum adds the samples of name whose labels include every pair of match
// ("key", "value", ...).
func (pp promPage) Sum(name string, match ...string) float64 {
	var sum float64
	for _, s := range pp {
		if s.name != name {
			continue
		}
		ok := true
		for i := 0; i+1 < len(match); i += 2 {
			if s.labels[match[i]] != match[i+1] {
				ok = false
			}
		}
		if ok {
			sum += s.value
		}
	}
	return sum
}

// Has reports whether any sample of name carries label key=value.
func (pp promPage) Has(name, key, value string) bool {
	for _, s := range pp {
		if s.name == name && s.labels[key] == value {
			return true
		}
	}
	return false
}

// ---- the gateway stand-in ----

// gw is the Envoy stand-in serving on a loopback port, with a recorder.
type gw struct {
	*gateway.Gateway
	URL    string
	client *http.Client
	mu     sync.Mutex
	recs   []timedRecord
}

// timedRecord is a gateway record with the wall time the request arrived.
type timedRecord struct {
	gateway.Record
	Start time.Time
}

// startGateway runs a gateway in front of the picker at pickerAddr. The
// message timeout is off (Envoy's behaviour in full-duplex mode) unless an
// option sets it.
func startGateway(t testing.TB, pickerAddr string, opts ...gateway.Option) *gw {
	t.Helper()
	g := &gw{}
	opts = append([]gateway.Option{gateway.WithMessageTimeout(0), gateway.WithRecorder(func(r gateway.Record) {
		g.mu.Lock()
		g.recs = append(g.recs, timedRecord{Record: r, Start: time.Now().Add(-r.Duration)})
		g.mu.Unlock()
	})}, opts...)
	var err error
	if g.Gateway, err = gateway.New(pickerAddr, opts...); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.URL = "http://" + lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(ctx, lis) }()
	g.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	t.Cleanup(func() {
		cancel()
		<-served
		_ = g.Close()
		g.client.CloseIdleConnections()
	})
	return g
}

// Records returns the records of the finished requests.
func (g *gw) Records() []timedRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]timedRecord(nil), g.recs...)
}

// WaitRecords waits until n requests have finished at the gateway.
func (g *gw) WaitRecords(t testing.TB, n int) []timedRecord {
	t.Helper()
	eventually(t, 60*time.Second, func() error {
		if got := len(g.Records()); got < n {
			return fmt.Errorf("%d of %d requests recorded", got, n)
		}
		return nil
	})
	return g.Records()
}

// Post sends body to path and returns the response.
func (g *gw) Post(ctx context.Context, path string, body []byte, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range header {
		req.Header[k] = vs
	}
	return g.client.Do(req)
}

// Complete sends a completion request and reads the whole answer; it
// returns the status and the body.
func (g *gw) Complete(ctx context.Context, body []byte) (int, string, error) {
	resp, err := g.Post(ctx, "/v1/completions", body, nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// completion builds a completion request body.
func completion(prompt string, maxTokens int, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": maxTokens, "stream": stream})
	return b
}

// randomPrompt returns a prompt with no prefix in common with others.
func randomPrompt(r *rand.Rand, words int) string {
	var b strings.Builder
	for i := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatUint(r.Uint64(), 36))
	}
	return b.String()
}

// ---- accounting ----

// releases sums inferpick_guard_releases_total by reason.
func releases(pp promPage) map[string]float64 {
	out := map[string]float64{}
	for _, s := range pp {
		if s.name == "inferpick_guard_releases_total" {
			out[s.labels["reason"]] += s.value
		}
	}
	return out
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

// ---- the API server ----

// cluster is an envtest control plane (etcd and kube-apiserver from
// KUBEBUILDER_ASSETS) with the project's CRDs and a kubeconfig for the
// picker process.
type cluster struct {
	env        *envtest.Environment
	Client     client.Client
	kubeconfig string
}

// clusterOnce starts a control plane on first use.
type clusterOnce struct {
	once sync.Once
	c    *cluster
	err  error
}

// shared is the control plane the cluster tests share; TestMain stops it.
var shared clusterOnce

func (s *clusterOnce) stop() {
	if s.c != nil {
		_ = s.c.env.Stop()
		_ = os.RemoveAll(filepath.Dir(s.c.kubeconfig))
	}
}

// sharedCluster returns the suite's control plane, starting it on first use.
func sharedCluster(t *testing.T) *cluster {
	t.Helper()
	skipWithoutAssets(t)
	shared.once.Do(func() { shared.c, shared.err = newCluster() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

// ownCluster starts a control plane for one test (one that stops its API
// server, say).
func ownCluster(t *testing.T) *cluster {
	t.Helper()
	skipWithoutAssets(t)
	c, err := newCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.env.Stop()
		_ = os.RemoveAll(filepath.Dir(c.kubeconfig))
	})
	return c
}

func skipWithoutAssets(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: run `make test-reliability` (it points at hack/controlplane.sh's directory)")
	}
}

func newCluster() (*cluster, error) {
	dir, err := os.MkdirTemp("", "inferpick-reliability-apiserver-")
	if err != nil {
		return nil, err
	}
	scheme, err := controllers.NewScheme()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	// A fixed directory keeps the serving certificate over an API server
	// restart, so the picker's kubeconfig stays valid.
	env.ControlPlane.GetAPIServer().CertDir = filepath.Join(dir, "apiserver")
	if err := os.Mkdir(env.ControlPlane.GetAPIServer().CertDir, 0o700); err != nil {
		return nil, err
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	c := &cluster{env: env, kubeconfig: filepath.Join(dir, "kubeconfig")}
	if c.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "inferpick", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	return c, os.WriteFile(c.kubeconfig, kc, 0o600)
}

// Namespace creates a namespace for the test.
func (c *cluster) Namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{}
	ns.GenerateName = "reliability-"
	if err := c.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// ReadyPod creates pod and gives it a ready status at ip.
func (c *cluster) ReadyPod(t *testing.T, pod *corev1.Pod, ip string) *corev1.Pod {
	t.Helper()
	if err := c.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	c.SetStatus(t, pod, func(p *corev1.Pod) { framework.SetReady(p, ip) })
	return pod
}

// SetStatus changes pod's status as a kubelet would.
func (c *cluster) SetStatus(t *testing.T, pod *corev1.Pod, f func(*corev1.Pod)) {
	t.Helper()
	if err := c.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	f(pod)
	if err := c.Client.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}

// startClusterPicker runs the picker for pool in ns, metrics in plain HTTP
// unless args turn authentication back on.
func startClusterPicker(t *testing.T, c *cluster, ns, pool string, args ...string) *picker {
	t.Helper()
	return startPicker(t, append([]string{"--kubeconfig", c.kubeconfig, "--pool-name", pool, "--pool-namespace", ns,
		"--metrics-endpoint-auth=false"}, args...)...)
}

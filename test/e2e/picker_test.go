package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inferpick/inferpick/test/gateway"
)

// pickerProcess is the picker binary run the way the chart's Deployment runs
// its container, on local ports.
type pickerProcess struct {
	*process
	grpcAddr, healthAddr, metricsAddr string
}

// startPicker runs the picker with the container args of the release's
// Deployment, as the ServiceAccount whose kubeconfig is given. Paths inside
// the container are replaced by local files holding what would be mounted
// there, and the ports by free local ones.
func startPicker(ctx context.Context, namespace, deployment, kubeconfig string) *pickerProcess {
	GinkgoHelper()
	var dep appsv1.Deployment
	Expect(suite.client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: deployment}, &dep)).To(Succeed())
	// The downward API's NAMESPACE.
	return runPicker(ctx, namespace, dep.Spec.Template.Spec, "inferpick", kubeconfig, []string{"NAMESPACE=" + namespace})
}

// runPicker runs the picker container of a pod spec as a local process named
// name, with env added.
func runPicker(ctx context.Context, namespace string, pod corev1.PodSpec, name, kubeconfig string, env []string) *pickerProcess {
	GinkgoHelper()
	Expect(pod.Containers).To(HaveLen(1))
	c := pod.Containers[0]

	mounts := map[string]string{} // mount path in the container → local directory
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		Expect(i).To(BeNumerically(">=", 0), "volume %s is not declared", m.Name)
		mounts[m.MountPath] = materialize(ctx, namespace, pod.Volumes[i])
	}
	args := make([]string, 0, len(c.Args)+8)
	for _, a := range c.Args {
		args = append(args, localPath(a, mounts))
	}
	p := &pickerProcess{}
	ports := [3]int{freePort(), freePort(), freePort()}
	p.grpcAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	p.healthAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	p.metricsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2]))
	// Later flags win: the Deployment's own ports are replaced.
	args = append(args,
		"--kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1",
		"--grpc-port="+strconv.Itoa(ports[0]),
		"--grpc-health-port="+strconv.Itoa(ports[1]),
		"--metrics-port="+strconv.Itoa(ports[2]),
	)
	p.process = start(name, suite.picker, env, args...)
	return p
}

// localPath rewrites the value of a --flag=value argument that lies under a
// mount path to the local directory standing in for that mount.
func localPath(arg string, mounts map[string]string) string {
	flag, value, ok := strings.Cut(arg, "=")
	if !ok {
		return arg
	}
	for path, local := range mounts {
		if rest, found := strings.CutPrefix(value, path); found && (rest == "" || strings.HasPrefix(rest, "/")) {
			return flag + "=" + local + rest
		}
	}
	return arg
}

// materialize writes what a volume would hold into a local directory.
func materialize(ctx context.Context, namespace string, v corev1.Volume) string {
	GinkgoHelper()
	dir := filepath.Join(suite.tmp, "volumes", v.Name)
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	switch {
	case v.ConfigMap != nil:
		var cm corev1.ConfigMap
		Expect(suite.client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: v.ConfigMap.Name}, &cm)).To(Succeed())
		for k, data := range cm.Data {
			Expect(os.WriteFile(filepath.Join(dir, k), []byte(data), 0o644)).To(Succeed())
		}
	case v.Secret != nil:
		var s corev1.Secret
		Expect(suite.client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: v.Secret.SecretName}, &s)).To(Succeed())
		for k, data := range s.Data {
			Expect(os.WriteFile(filepath.Join(dir, k), data, 0o600)).To(Succeed())
		}
	case v.EmptyDir != nil:
	default:
		Fail(fmt.Sprintf("volume %s has a source the suite cannot provide", v.Name))
	}
	return dir
}

// health asks the picker's gRPC health service about service.
func (p *pickerProcess) health(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(p.healthAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}

// waitReady waits until the picker reports readiness, as the kubelet's gRPC
// probe would see it.
func (p *pickerProcess) waitReady(ctx context.Context) {
	GinkgoHelper()
	Eventually(func() (healthpb.HealthCheckResponse_ServingStatus, error) {
		if done, err := p.exited(); done {
			return 0, StopTrying(fmt.Sprintf("picker exited: %v\n%s", err, p.output()))
		}
		return p.health(ctx, "readiness")
	}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(200*time.Millisecond).
		Should(Equal(healthpb.HealthCheckResponse_SERVING), "picker never became ready")
}

// workersView is the part of /debug/workers the suite reads.
type workersView struct {
	Synced  bool `json:"synced"`
	Workers []struct {
		Name    string `json:"name"`
		Address string `json:"address"`
	} `json:"workers"`
}

// metricsClient talks to the picker's metrics port: plain HTTP with token
// authentication, as the chart configures it by default.
var metricsClient = &http.Client{Timeout: 10 * time.Second}

// get fetches path from the metrics port with an optional bearer token and
// returns the status code and body.
func (p *pickerProcess) get(ctx context.Context, path, token string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metricsAddr+path, http.NoBody)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// workerAddresses returns the sorted addresses on /debug/workers.
func (p *pickerProcess) workerAddresses(ctx context.Context, token string) ([]string, error) {
	code, body, err := p.get(ctx, "/debug/workers", token)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/debug/workers: %d %s", code, body)
	}
	var v workersView
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("/debug/workers: %w", err)
	}
	addrs := make([]string, 0, len(v.Workers))
	for _, w := range v.Workers {
		addrs = append(addrs, w.Address)
	}
	slices.Sort(addrs)
	return addrs, nil
}

// gatewayFor runs the gateway stand-in in front of the picker, speaking TLS
// to its self-signed ext_proc server, and returns its base URL and the
// records of finished requests.
func gatewayFor(p *pickerProcess) (string, <-chan gateway.Record) {
	GinkgoHelper()
	records := make(chan gateway.Record, 64)
	gw, err := gateway.New(p.grpcAddr,
		gateway.WithPickerTLS(&tls.Config{InsecureSkipVerify: true}), // the picker under test is self-signed, on loopback
		gateway.WithMessageTimeout(10*time.Second),
		gateway.WithRecorder(func(r gateway.Record) {
			select {
			case records <- r:
			default:
			}
		}),
	)
	Expect(err).NotTo(HaveOccurred())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ctx, lis) }()
	DeferCleanup(func() {
		cancel()
		Eventually(served).WithTimeout(15 * time.Second).Should(Receive(BeNil()))
		Expect(gw.Close()).To(Succeed())
	})
	return "http://" + lis.Addr().String(), records
}

// complete sends one OpenAI completion through the gateway and returns the
// status, the body and the gateway's record of the request.
func complete(ctx context.Context, base string, records <-chan gateway.Record, prompt string) (int, string, gateway.Record) {
	GinkgoHelper()
	body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":4}`, prompt)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	var rec gateway.Record
	Eventually(records).WithTimeout(10 * time.Second).Should(Receive(&rec))
	return resp.StatusCode, string(got), rec
}

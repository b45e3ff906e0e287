package controller

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferpick/inferpick/cmd/inferpick/app"
	"github.com/inferpick/inferpick/test/framework"
	ifw "github.com/inferpick/inferpick/test/integration/framework"
)

// The picker as cmd/inferpick runs it (app.Run) against the API server:
// through the drain that follows SIGTERM it still follows the pool, so a
// request it routes then (one that waited in the flow-control queue) never
// goes to a pod deleted meanwhile, as in a node drain that evicts the
// picker and model servers together.
var _ = Describe("A draining picker", func() {
	It("follows the pool until its streams have ended", func(ctx SpecContext) {
		ns := env.Namespace(ctx, "drain")
		Expect(env.Client.Create(ctx, ifw.MakePool(ns, "pool").Ports(8000).Obj())).To(Succeed())
		pods := map[string]*corev1.Pod{}
		for i, ip := range []string{"127.0.0.1", "127.0.0.2"} {
			pod := ifw.MakePod(ns, fmt.Sprintf("vllm-%d", i)).Obj()
			Expect(env.Client.Create(ctx, pod)).To(Succeed())
			updateStatus(ctx, pod, func(p *corev1.Pod) { ifw.SetReady(p, ip) })
			pods[ip+":8000"] = pod
		}

		ports, err := framework.FreePorts("127.0.0.1", 3)
		Expect(err).NotTo(HaveOccurred())
		grpcPort, healthPort, metricsPort := ports[0], ports[1], ports[2]
		o, err := app.Parse(flag.NewFlagSet("inferpick", flag.ContinueOnError), []string{
			"--kubeconfig", env.Kubeconfig, "--pool-name", "pool", "--pool-namespace", ns,
			"--bind-address", "127.0.0.1", "--secure-serving=false", "--metrics-endpoint-auth=false",
			"--grpc-port", fmt.Sprint(grpcPort), "--grpc-health-port", fmt.Sprint(healthPort), "--metrics-port", fmt.Sprint(metricsPort),
			"--refresh-metrics-interval", "1h", "--drain-timeout", "60s",
			"--flow-control", "--config-text", "policy:\n  name: least-load\n  maxInFlight: 1\n",
		})
		Expect(err).NotTo(HaveOccurred())
		runCtx, sigterm := context.WithCancel(context.Background())
		DeferCleanup(sigterm)
		done := make(chan error, 1)
		go func() { done <- app.Run(runCtx, o) }()

		health := healthpb.NewHealthClient(dialLoopback(healthPort))
		readiness := func() healthpb.HealthCheckResponse_ServingStatus {
			r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
			if err != nil {
				return healthpb.HealthCheckResponse_UNKNOWN
			}
			return r.GetStatus()
		}
		Eventually(readiness).Should(Equal(healthpb.HealthCheckResponse_SERVING))
		extProc := extprocv3.NewExternalProcessorClient(dialLoopback(grpcPort))

		By("one request in flight on each pod, and a third waiting in the queue")
		kept, keptDest := routedRequest(ctx, extProc)
		gone, goneDest := routedRequest(ctx, extProc)
		Expect(keptDest).NotTo(Equal(goneDest))
		queued := openCompletion(ctx, extProc)
		queuedDest := make(chan string, 1)
		go func() {
			defer GinkgoRecover()
			r, err := queued.Recv()
			Expect(err).NotTo(HaveOccurred())
			queuedDest <- destination(r)
		}()
		Eventually(func() string { return getLoopback(metricsPort, "/metrics") }).
			Should(ContainSubstring(`inferpick_flowcontrol_queue_length{priority="0"} 1`))

		By("SIGTERM: not ready, draining")
		sigterm()
		Eventually(readiness).Should(Equal(healthpb.HealthCheckResponse_NOT_SERVING))

		By("the pod of one request is deleted during the drain")
		Expect(env.Client.Delete(ctx, pods[goneDest], client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func() string { return getLoopback(metricsPort, "/debug/workers") }).
			ShouldNot(ContainSubstring(`"`+goneDest+`"`), "the draining picker still lists the pod deleted during the drain")

		By("its request ends, then the other's: the queued request goes to the pod that is left")
		finishCompletion(gone)
		finishCompletion(kept)
		Eventually(queuedDest).Should(Receive(Equal(keptDest)))
		Expect(queued.CloseSend()).To(Succeed())
		Eventually(done, framework.LongTimeout).Should(Receive(BeNil()))
	})
})

func dialLoopback(port int) *grpc.ClientConn {
	GinkgoHelper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(conn.Close)
	return conn
}

// getLoopback returns the body of path on the loopback port, "" on an error.
func getLoopback(port int, path string) string {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		return ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// openCompletion sends a completion's headers and body on a new stream.
func openCompletion(ctx context.Context, c extprocv3.ExternalProcessorClient) extprocv3.ExternalProcessor_ProcessClient {
	GinkgoHelper()
	s, err := c.Process(ctx)
	Expect(err).NotTo(HaveOccurred())
	hdrs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}}}
	Expect(s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs}}})).To(Succeed())
	Expect(s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(`{"model":"m","prompt":"hello"}`), EndOfStream: true}}})).To(Succeed())
	return s
}

// routedRequest opens a completion, reads the pick and the body's reply,
// and returns the stream, in flight, and its destination.
func routedRequest(ctx context.Context, c extprocv3.ExternalProcessorClient) (extprocv3.ExternalProcessor_ProcessClient, string) {
	GinkgoHelper()
	s := openCompletion(ctx, c)
	r, err := s.Recv()
	Expect(err).NotTo(HaveOccurred())
	dest := destination(r)
	Expect(dest).NotTo(BeEmpty(), "not routed: %v", r)
	_, err = s.Recv() // the body
	Expect(err).NotTo(HaveOccurred())
	return s, dest
}

// destination is the endpoint a request-headers reply routes to, "" when
// it routes nowhere.
func destination(r *extprocv3.ProcessingResponse) string {
	for _, h := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			return strings.SplitN(string(h.GetHeader().GetRawValue()), ",", 2)[0]
		}
	}
	return ""
}

// finishCompletion answers s with a 200 response that ends it.
func finishCompletion(s extprocv3.ExternalProcessor_ProcessClient) {
	GinkgoHelper()
	Expect(s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")}}}, EndOfStream: true},
	}})).To(Succeed())
	_, err := s.Recv()
	Expect(err).NotTo(HaveOccurred())
	Expect(s.CloseSend()).To(Succeed())
}

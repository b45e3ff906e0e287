package extproc

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The exchange benchmark's gateway runs in a child process (this test
// binary, started with gatewayEnv set) so that the benchmark's allocation
// and CPU figures are the picker's alone, as they are in production where
// the gateway is Envoy.
const (
	gatewayEnv     = "INFERPICK_EXTPROC_BENCH_GATEWAY"
	gatewayBodyEnv = "INFERPICK_EXTPROC_BENCH_GATEWAY_BODY"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(gatewayEnv); addr != "" {
		if err := runGateway(addr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	code := m.Run()
	if code == 0 && os.Getenv(transportEnv) == "" && !benchmarking() {
		code = rerunOverGRPC()
	}
	os.Exit(code)
}

// benchmarking reports whether the binary runs benchmarks or a fuzz
// target, which run once, over the direct transport, or only lists the
// tests (hack/fuzz.sh finds the fuzz targets so).
func benchmarking() bool {
	for _, name := range []string{"test.bench", "test.fuzz", "test.list"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return true
		}
	}
	return false
}

// rerunOverGRPC runs the package's tests again in a child process serving
// over grpc-go's transport (--extproc-transport=grpc), and returns its exit
// code.
func rerunOverGRPC() int {
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), transportEnv+"=grpc")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "rerun over grpc:", err)
		return 1
	}
	return 0
}

// envoyWindow is Envoy's default HTTP/2 stream and connection window.
const envoyWindow = 256 << 20

// runGateway connects to the picker at addr and, for every byte read from
// stdin, runs one exchange and answers with a byte on stdout: '.' when it
// went as expected, else an error line. It returns when stdin closes.
func runGateway(addr string) error {
	size, err := strconv.Atoi(os.Getenv(gatewayBodyEnv))
	if err != nil {
		return fmt.Errorf("gateway body size: %w", err)
	}
	// Envoy's HTTP/2 defaults: 256 MiB windows, so no window estimation
	// pings (test/gateway.EnvoyDialOptions, which this package cannot import).
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(envoyWindow), grpc.WithInitialConnWindowSize(envoyWindow))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := extprocv3.NewExternalProcessorClient(conn)
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = benchChatBody(i%benchTenants, i, size)
	}
	in, out := bufio.NewReader(os.Stdin), bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		if _, err := in.ReadByte(); err != nil {
			return nil
		}
		if err := roundTrip(context.Background(), client, bodies[i%len(bodies)]); err != nil {
			fmt.Fprintf(out, "exchange %d: %v\n", i, err)
		} else {
			_ = out.WriteByte('.')
		}
		if err := out.Flush(); err != nil {
			return err
		}
	}
}

// gateway is the child process that drives exchanges against the picker.
type gateway struct {
	in  io.WriteCloser
	out *bufio.Reader
	one []byte
}

// startGateway runs the gateway against addr for the rest of the benchmark.
func startGateway(b *testing.B, addr string, bodySize int) *gateway {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), gatewayEnv+"="+addr, gatewayBodyEnv+"="+strconv.Itoa(bodySize))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	return &gateway{in: stdin, out: bufio.NewReader(stdout), one: []byte{'x'}}
}

// exchange has the gateway run one exchange and waits for it.
func (g *gateway) exchange(b *testing.B) {
	if _, err := g.in.Write(g.one); err != nil {
		b.Fatal(err)
	}
	c, err := g.out.ReadByte()
	if err != nil {
		b.Fatalf("gateway: %v", err)
	}
	if c != '.' {
		line, _ := g.out.ReadString('\n')
		b.Fatalf("gateway: %c%s", c, line)
	}
}

// roundTrip sends one request and reads its routing reply and body.
func roundTrip(ctx context.Context, client extprocv3.ExternalProcessorClient, body []byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := client.Process(ctx)
	if err != nil {
		return err
	}
	hdr := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")},
		{Key: ":path", RawValue: []byte("/v1/chat/completions")},
		{Key: ":authority", RawValue: []byte("gateway")},
		{Key: "content-type", RawValue: []byte("application/json")},
		{Key: "content-length", RawValue: []byte(strconv.Itoa(len(body)))},
	}}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hdr}}}); err != nil {
		return err
	}
	for off := 0; off < len(body); off += benchChunk {
		end := min(off+benchChunk, len(body))
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
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
	got := 0
	for got < len(body) {
		r, err := st.Recv()
		if err != nil {
			return err
		}
		got += len(r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody())
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("want the stream to end, got %w", err)
	}
	return nil
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

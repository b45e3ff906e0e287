package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/inferpick/inferpick/test/framework"
)

// TestServingFlags runs the binary with the upstream serving flags and
// checks what a client sees: pprof on the metrics port, TLS below the
// minimum version refused, messages above the receive limit refused.
func TestServingFlags(t *testing.T) {
	grpcPort, healthPort, metricsPort := framework.FreePortT(t), framework.FreePortT(t), framework.FreePortT(t)
	p := startBinary(t, healthPort, "--static-endpoints", "127.0.0.1:1", "--bind-address", "127.0.0.1",
		"--refresh-metrics-interval", "1h", "--enable-pprof",
		"--tls-min-version", "VersionTLS13", "--grpc-max-recv-msg-size", "1Ki",
		"--grpc-port", fmt.Sprint(grpcPort), "--grpc-health-port", fmt.Sprint(healthPort), "--metrics-port", fmt.Sprint(metricsPort))
	defer p.stop(t)

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/cmdline", metricsPort))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/debug/pprof/cmdline: %s, want 200", resp.Status)
	}

	addr := fmt.Sprintf("127.0.0.1:%d", grpcPort)
	for version, wantOK := range map[uint16]bool{tls.VersionTLS12: false, tls.VersionTLS13: true} {
		//nolint:gosec // the server's certificate is self-signed.
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: version, MaxVersion: version, NextProtos: []string{"h2"}})
		if err == nil {
			_ = conn.Close()
		}
		if (err == nil) != wantOK {
			t.Errorf("TLS %s handshake: error %v, want success %v", tls.VersionName(version), err, wantOK)
		}
	}

	//nolint:gosec // the server's certificate is self-signed.
	creds := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	streamCtx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(cc).Process(streamCtx)
	if err != nil {
		t.Fatal(err)
	}
	big := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: bytes.Repeat([]byte("x"), 2048)},
	}}
	_ = stream.Send(big)
	if _, err := stream.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("2 KiB message with --grpc-max-recv-msg-size 1Ki: %v, want ResourceExhausted", err)
	}
}

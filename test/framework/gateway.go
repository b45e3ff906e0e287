package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/gateway"
)

// Gateway is the Envoy stand-in serving on a loopback port, recording every
// finished request.
type Gateway struct {
	*gateway.Gateway
	// URL is the gateway's base URL; Client talks to it.
	URL    string
	Client *http.Client
	// Addr is its ip:port, where gRPC clients (DialGRPC) reach it over
	// HTTP/2 cleartext.
	Addr string
	mu   sync.Mutex
	recs []Record
}

// Record is a gateway record with the wall time the request arrived.
type Record struct {
	gateway.Record
	Start time.Time
}

// StartGatewayT runs a gateway in front of the picker at pickerAddr until
// the test ends. The message timeout is off (Envoy's behaviour in
// full-duplex mode) unless an option sets it.
func StartGatewayT(t testing.TB, pickerAddr string, opts ...gateway.Option) *Gateway {
	t.Helper()
	return startGateway(t, func(opts ...gateway.Option) (*gateway.Gateway, error) {
		return gateway.New(pickerAddr, opts...)
	}, opts)
}

// StartClusterGatewayT is StartGatewayT in front of several picker
// replicas, as Envoy balances an ext_proc cluster.
func StartClusterGatewayT(t testing.TB, pickerAddrs []string, opts ...gateway.Option) *Gateway {
	t.Helper()
	return startGateway(t, func(opts ...gateway.Option) (*gateway.Gateway, error) {
		return gateway.NewCluster(pickerAddrs, opts...)
	}, opts)
}

func startGateway(t testing.TB, newGateway func(...gateway.Option) (*gateway.Gateway, error), opts []gateway.Option) *Gateway {
	t.Helper()
	g := &Gateway{}
	opts = append([]gateway.Option{gateway.WithMessageTimeout(0), gateway.WithRecorder(func(r gateway.Record) {
		g.mu.Lock()
		g.recs = append(g.recs, Record{Record: r, Start: time.Now().Add(-r.Duration)})
		g.mu.Unlock()
	})}, opts...)
	var err error
	if g.Gateway, err = newGateway(opts...); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.Addr = lis.Addr().String()
	g.URL = "http://" + g.Addr
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(ctx, lis) }()
	g.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	t.Cleanup(func() {
		cancel()
		<-served
		_ = g.Close()
		g.Client.CloseIdleConnections()
	})
	return g
}

// Records returns the records of the finished requests.
func (g *Gateway) Records() []Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Record(nil), g.recs...)
}

// WaitRecords waits until n requests have finished at the gateway.
func (g *Gateway) WaitRecords(t testing.TB, n int) []Record {
	t.Helper()
	Eventually(t, LongTimeout, "requests recorded by the gateway", func() error {
		if got := len(g.Records()); got < n {
			return fmt.Errorf("%d of %d requests recorded", got, n)
		}
		return nil
	})
	return g.Records()
}

// Post sends body to path and returns the response.
func (g *Gateway) Post(ctx context.Context, path string, body []byte, header http.Header) (*http.Response, error) {
	return post(ctx, g.Client, g.URL+path, body, header)
}

// Complete sends a completion request and reads the whole answer; it
// returns the status and the body.
func (g *Gateway) Complete(ctx context.Context, body []byte) (int, string, error) {
	return complete(ctx, g.Client, g.URL, body)
}

// post sends a JSON body to url with client.
func post(ctx context.Context, client *http.Client, url string, body []byte, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range header {
		req.Header[k] = vs
	}
	return client.Do(req)
}

// complete posts a completion request to base's /v1/completions and reads
// the whole answer: the status and the body.
func complete(ctx context.Context, client *http.Client, base string, body []byte) (int, string, error) {
	resp, err := post(ctx, client, base+"/v1/completions", body, nil)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Completion builds a completion request body for model.
func Completion(model, prompt string, maxTokens int, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens, "stream": stream})
	return b
}

package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"
)

// SimPackage is the simulator's main package, for Binary.
const SimPackage = "./cmd/vllm-sim"

// simAnnounce is what vllm-sim prints, followed by its address, once it
// listens.
const simAnnounce = "vllm-sim listening on http://"

// simGRPCAnnounce is what vllm-sim prints, followed by its gRPC address,
// before simAnnounce when it serves its gRPC API.
const simGRPCAnnounce = "vllm-sim gRPC listening on "

// SimGRPCArgs are the simulator arguments that serve vLLM's gRPC engine
// API on a free port beside HTTP; the started Sim's GRPCAddr is then set.
var SimGRPCArgs = []string{"--grpc-port", "0"}

// Sim is a vllm-sim process standing in for one model-server pod.
type Sim struct {
	*Process
	// Addr is the ip:port it serves HTTP (and /metrics) on.
	Addr string
	// GRPCAddr is the ip:port of its VllmEngine gRPC API, "" unless it was
	// started with --grpc-port (SimGRPCArgs).
	GRPCAddr string
}

// grpcAddr reads the gRPC address p announced, when args asked for one;
// p has announced its HTTP address already, which comes after it.
func grpcAddr(ctx context.Context, p *Process, args []string) (string, error) {
	if !slices.Contains(args, "--grpc-port") {
		return "", nil
	}
	return p.WaitFor(ctx, Timeout, simGRPCAnnounce)
}

// StartSim runs the simulator bin on host:port (port 0: any) with args
// added, and waits until it listens.
func StartSim(ctx context.Context, bin, host string, port int, log string, args ...string) (*Sim, error) {
	p, err := Start(Cmd{
		Name: "vllm-sim " + host,
		Path: bin,
		Args: append([]string{"--host", host, "--port", strconv.Itoa(port)}, args...),
		Log:  log,
	})
	if err != nil {
		return nil, err
	}
	addr, err := p.WaitFor(ctx, Timeout, simAnnounce)
	if err == nil {
		var g string
		if g, err = grpcAddr(ctx, p, args); err == nil {
			return &Sim{Process: p, Addr: addr, GRPCAddr: g}, nil
		}
	}
	return nil, fmt.Errorf("%w (and %w)", err, p.Stop(5*time.Second))
}

// StartSimT is StartSim for a test: the test's cleanup stops it.
func StartSimT(t testing.TB, bin, host string, port int, args ...string) *Sim {
	t.Helper()
	p := StartT(t, Cmd{
		Name: "vllm-sim " + host,
		Path: bin,
		Args: append([]string{"--host", host, "--port", strconv.Itoa(port)}, args...),
	})
	addr, err := p.WaitFor(t.Context(), Timeout, simAnnounce)
	if err != nil {
		t.Fatal(err)
	}
	g, err := grpcAddr(t.Context(), p, args)
	if err != nil {
		t.Fatal(err)
	}
	return &Sim{Process: p, Addr: addr, GRPCAddr: g}
}

// SimStats is the part of GET /sim/stats the suites read: totals since the
// simulator started.
type SimStats struct {
	Requests int64 `json:"requests"`
	Finished int64 `json:"finished"`
	Aborted  int64 `json:"aborted"`
	Running  int   `json:"running"`
	Waiting  int   `json:"waiting"`
	// CachedBlocks is the blocks the prefix caches hold (over the
	// simulator's engines).
	CachedBlocks int `json:"cached_blocks"`
	// OffloadedTokens is the prompt tokens loaded back from an offloading
	// tier (vllm-sim --kv-offloading-blocks).
	OffloadedTokens int64 `json:"offloaded_tokens"`
	// PrefilledRemotely is the requests the simulator, as a decode pod's
	// sidecar, had prefilled on the pod x-prefiller-host-port named;
	// TransferredTokens the prompt tokens it pulled from there.
	PrefilledRemotely int64 `json:"prefilled_remotely"`
	TransferredTokens int64 `json:"transferred_tokens"`
	// EncodedItems is the media items the simulator, as a decode pod's
	// sidecar, had encoded on the pods x-encoder-hosts-ports named.
	EncodedItems int64 `json:"encoded_items"`
}

// Complete sends a completion request straight to the simulator and reads
// the whole answer; it returns the status and the body.
func (s *Sim) Complete(ctx context.Context, body []byte) (int, string, error) {
	return complete(ctx, http.DefaultClient, "http://"+s.Addr, body)
}

// Stats reads the simulator's counters.
func (s *Sim) Stats(ctx context.Context) (SimStats, error) {
	var st SimStats
	err := GetJSON(ctx, "http://"+s.Addr+"/sim/stats", &st)
	return st, err
}

// SetFaults patches the simulator's faults (fields of its faults JSON).
func (s *Sim) SetFaults(ctx context.Context, patch map[string]any) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.Addr+"/sim/faults", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("set faults on %s: %w", s.Addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("set faults on %s: %s: %s", s.Addr, resp.Status, body)
	}
	return nil
}

// GetJSON GETs url and decodes a 200 answer into v.
func GetJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return err
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/engine"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/faults"
)

const testModel = "sim-model"

type simOptions struct {
	engine engine.Config
	scale  float64
	faults faults.Config
	// served and lora replace the single served name testModel.
	served []string
	lora   []LoRAModule
	// prefillTimeout bounds the call to a prefill pod (0: the default).
	prefillTimeout time.Duration
}

func defaultSim() simOptions {
	cfg := engine.DefaultConfig()
	cfg.BlockSize = 4
	cfg.NumGPUBlocks = 512
	return simOptions{engine: cfg, faults: faults.None()}
}

// startSim serves a simulator on a loopback httptest server until the test
// ends.
func startSim(t *testing.T, o simOptions) string {
	t.Helper()
	_, url := startServer(t, o)
	return url
}

// startServer is startSim that also returns the server.
func startServer(t *testing.T, o simOptions) (*Server, string) {
	t.Helper()
	eng, err := engine.New(o.engine, engine.WithPacer(&engine.WallPacer{Scale: o.scale}))
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	srv, err := New(Config{Model: testModel, ServedModelNames: o.served, LoRAModules: o.lora, Engine: eng,
		Faults: faults.NewState(o.faults, 1), PrefillTimeout: o.prefillTimeout})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); eng.Run(ctx) }()
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		cancel()
		<-done
		ts.Close()
	})
	return srv, ts.URL
}

func post(ctx context.Context, t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

// postJSON posts body and decodes the answer into out, returning the status.
func postJSON(t *testing.T, url, body string, out any) int {
	t.Helper()
	resp := post(t.Context(), t, url, body)
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("decode %s answer: %v", url, err)
		}
	}
	return resp.StatusCode
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("decode %s: %v", url, err)
	}
}

// readEvent returns the data of the next server-sent event.
func readEvent(br *bufio.Reader) (string, error) {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\r\n")
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			blank, err := br.ReadString('\n')
			if err != nil {
				return "", fmt.Errorf("event %q not followed by a blank line: %w", data, err)
			}
			if blank != "\n" {
				return "", fmt.Errorf("event %q followed by %q, want a blank line", data, blank)
			}
			return data, nil
		}
		if line != "" {
			return "", fmt.Errorf("unexpected line %q", line)
		}
	}
}

// readAllEvents reads events until the body ends.
func readAllEvents(t *testing.T, body io.Reader) []string {
	t.Helper()
	br := bufio.NewReader(body)
	var events []string
	for {
		ev, err := readEvent(br)
		if errors.Is(err, io.EOF) {
			return events
		}
		if err != nil {
			t.Fatalf("after %d events: %v", len(events), err)
		}
		events = append(events, ev)
	}
}

// scrape parses /metrics and returns the value of each gauge and counter
// (summed over series) by name.
func scrape(t *testing.T, base string) (map[string]float64, error) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	values := map[string]float64{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				values[name] += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				values[name] += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				values[name+"_count"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return values, nil
}

// eventually polls cond until it holds or 10 seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

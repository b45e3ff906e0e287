package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/faults"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/openai"
)

const streamBody = `{"prompt":"hello there","max_tokens":5,"stream":true}`

func setFaults(t *testing.T, base, patch string) {
	t.Helper()
	var got faults.Config
	if status := postJSON(t, base+"/sim/faults", patch, &got); status != http.StatusOK {
		t.Fatalf("POST /sim/faults %s: status %d", patch, status)
	}
}

func TestInjectedErrors(t *testing.T) {
	base := startSim(t, defaultSim())
	setFaults(t, base, `{"error_rate":1,"error_status":503}`)
	var e openai.ErrorResponse
	if status := postJSON(t, base+"/v1/completions", `{"prompt":"x"}`, &e); status != 503 || e.Error.Code != 503 {
		t.Errorf("with error_rate 1: status %d body %+v, want 503", status, e)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, base+"/sim/faults", http.NoBody)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if status := postJSON(t, base+"/v1/completions", `{"prompt":"x"}`, nil); status != 200 {
		t.Errorf("after DELETE /sim/faults: status %d, want 200", status)
	}
	var st Stats
	getJSON(t, base+"/sim/stats", &st)
	if st.InjectedErrors != 1 || st.Finished != 1 {
		t.Errorf("stats %+v, want 1 injected error and 1 finished request", st)
	}
	if status := postJSON(t, base+"/sim/faults", `{"error_rate":2}`, nil); status != http.StatusBadRequest {
		t.Errorf("invalid fault patch: status %d, want 400", status)
	}
}

func TestStallKeepsTheStreamOpenUntilTheClientLeaves(t *testing.T) {
	base := startSim(t, defaultSim())
	setFaults(t, base, `{"stall_after_chunks":2}`)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := post(ctx, t, base+"/v1/completions", streamBody)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 2 {
		if _, err := readEvent(br); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	// The engine finishes the sequence, but nothing more is sent.
	eventually(t, "the sequence to finish", func() bool {
		var st Stats
		getJSON(t, base+"/sim/stats", &st)
		return st.Finished == 1
	})
	rest := make(chan error, 1)
	go func() {
		_, err := readEvent(br)
		rest <- err
	}()
	cancel()
	if err := <-rest; !errors.Is(err, context.Canceled) {
		t.Errorf("read after the stall ended with %v, want our cancellation", err)
	}
}

func TestDropClosesTheConnectionMidStream(t *testing.T) {
	base := startSim(t, defaultSim())
	setFaults(t, base, `{"drop_after_chunks":1}`)
	resp := post(t.Context(), t, base+"/v1/completions", streamBody)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := readEvent(br); err != nil {
		t.Fatalf("first event: %v", err)
	}
	_, err := readEvent(br)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read after the drop: %v, want unexpected EOF", err)
	}
	setFaults(t, base, `{"drop_after_chunks":-1,"stall_after_chunks":-1}`)
	if status := postJSON(t, base+"/v1/completions", `{"prompt":"x"}`, nil); status != 200 {
		t.Errorf("after turning faults off: status %d", status)
	}
}

func TestMetricsFaults(t *testing.T) {
	base := startSim(t, defaultSim())
	if _, err := scrape(t, base); err != nil {
		t.Fatalf("healthy metrics: %v", err)
	}
	setFaults(t, base, `{"metrics_garbage":true}`)
	if _, err := scrape(t, base); err == nil {
		t.Error("garbage metrics parsed without error")
	}
	setFaults(t, base, `{"metrics_garbage":false,"metrics_delay_ms":600000}`)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", http.NoBody)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Error("metrics answered although delayed by ten minutes")
	} else if !strings.Contains(err.Error(), "deadline") {
		t.Errorf("delayed metrics: %v, want the client's deadline", err)
	}
}

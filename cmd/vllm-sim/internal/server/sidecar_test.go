package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/openai"
)

// postVia posts body to url naming prefillPod in PrefillerHeader.
func postVia(ctx context.Context, t *testing.T, url, prefillPod, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(PrefillerHeader, prefillPod)
	return http.DefaultClient.Do(req)
}

// postViaJSON posts as postVia and decodes the answer into out, returning
// the status.
func postViaJSON(t *testing.T, url, prefillPod, body string, out any) int {
	t.Helper()
	resp, err := postVia(t.Context(), t, url, prefillPod, body)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("decode %s answer: %v", url, err)
	}
	return resp.StatusCode
}

func simStats(t *testing.T, base string) Stats {
	t.Helper()
	var st Stats
	getJSON(t, base+"/sim/stats", &st)
	return st
}

func metricsOf(t *testing.T, base string) map[string]float64 {
	t.Helper()
	m, err := scrape(t, base)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func hostPort(base string) string { return strings.TrimPrefix(base, "http://") }

// slowPrefill is a simulator whose prefills take far longer than any test.
func slowPrefill() simOptions {
	o := defaultSim()
	o.engine.PrefillPerToken = time.Hour
	o.scale = 1
	return o
}

func TestPrefillPodComputesThePromptAndDecodePodPullsIt(t *testing.T) {
	decode := defaultSim()
	decode.engine.PrefillPerToken = 10 * time.Millisecond
	decode.engine.TransferPerBlock = 50 * time.Microsecond
	a, b := startSim(t, decode), startSim(t, defaultSim())
	prompt := `"prompt":"` + longPrefix + `first?"` // 147 tokens

	var first openai.Completion
	if status := postViaJSON(t, a+"/v1/completions", hostPort(b), `{"model":"sim-model",`+prompt+`,"max_tokens":3}`, &first); status != http.StatusOK {
		t.Fatalf("status %d, want 200", status)
	}
	want := openai.Usage{PromptTokens: 147, CompletionTokens: 3, TotalTokens: 150,
		PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: 146}}
	if diff := cmp.Diff(&want, first.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	// The prefill pod computed the prompt and one token.
	if st := simStats(t, b); st.Requests != 1 || st.Finished != 1 || st.PromptTokens != 147 || st.GenerationTokens != 1 {
		t.Errorf("prefill pod stats %+v, want one finished request of 147 prompt tokens and 1 token", st)
	}
	ma := metricsOf(t, a)
	got := map[string]float64{
		"external queries": ma["vllm:external_prefix_cache_queries_total"], "external hits": ma["vllm:external_prefix_cache_hits_total"],
		"queries": ma["vllm:prefix_cache_queries_total"], "hits": ma["vllm:prefix_cache_hits_total"],
		"generated": ma["vllm:generation_tokens_total"], "running": ma["vllm:num_requests_running"],
	}
	wantM := map[string]float64{"external queries": 147, "external hits": 147, "queries": 147, "hits": 0, "generated": 3, "running": 0}
	if diff := cmp.Diff(wantM, got); diff != "" {
		t.Errorf("decode pod metrics (-want +got):\n%s", diff)
	}
	// Its first token cost one step: one prompt token and 37 blocks pulled,
	// not 147 prompt tokens computed.
	st := simStats(t, a)
	ttft := decode.engine.StepOverhead + decode.engine.PrefillPerToken + 37*decode.engine.TransferPerBlock
	if st.MeanSimulatedTTFTSeconds != ttft.Seconds() || st.TransferredTokens != 147 || st.Prefilled != 1 {
		t.Errorf("decode pod stats %+v, want a simulated TTFT of %v, 147 tokens transferred, 1 prefilled remotely", st, ttft)
	}

	// The pulled blocks are the decode pod's own now.
	var second openai.Completion
	postJSON(t, a+"/v1/completions", `{"model":"sim-model",`+prompt+`,"max_tokens":3}`, &second)
	if got := second.Usage.PromptTokensDetails.CachedTokens; got != 144 {
		t.Errorf("the same prompt again, without a prefill pod: %d cached tokens, want 144 (36 full blocks)", got)
	}
	if hits := metricsOf(t, a)["vllm:prefix_cache_hits_total"]; hits != 144 {
		t.Errorf("decode pod prefix cache hits %g, want 144", hits)
	}
	if st := simStats(t, b); st.Requests != 1 {
		t.Errorf("prefill pod saw %d requests, want only the first", st.Requests)
	}
}

func TestPrefillRequestIsTheOneLLMDsSidecarSends(t *testing.T) {
	type seen struct {
		path, prefiller string
		body            map[string]any
	}
	got := make(chan seen, 1)
	prefill := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		got <- seen{path: r.URL.Path, prefiller: r.Header.Get(PrefillerHeader), body: body}
		_, _ = io.WriteString(w, `{"id":"p","kv_transfer_params":{"do_remote_prefill":true}}`)
	}))
	t.Cleanup(prefill.Close)
	a := startSim(t, defaultSim())

	body := `{"messages":[{"role":"user","content":"` + longPrefix + `"}],"cache_salt":"s1",` +
		`"max_completion_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`
	// Only the first of several entries counts, "http://" allowed before it.
	resp, err := postVia(t.Context(), t, a+"/v1/chat/completions", " http://"+hostPort(prefill.URL)+", 10.9.9.9:8000", body)
	if err != nil {
		t.Fatal(err)
	}
	events := readAllEvents(t, resp.Body)
	resp.Body.Close()

	p := <-got
	if p.path != "/v1/chat/completions" || p.prefiller != "" {
		t.Errorf("prefill request on %q with %s %q, want the same path and no such header", p.path, PrefillerHeader, p.prefiller)
	}
	wantBody := map[string]any{
		"messages":   []any{map[string]any{"role": "user", "content": longPrefix}},
		"cache_salt": "s1", "max_tokens": 1.0, "max_completion_tokens": 1.0, "stream": false,
		"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
			"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil},
	}
	if diff := cmp.Diff(wantBody, p.body); diff != "" {
		t.Errorf("prefill body (-want +got):\n%s", diff)
	}
	// The client's own request is served as streamed: five tokens, usage
	// and [DONE], the prompt but its last token pulled.
	if len(events) != 7 || events[6] != "[DONE]" {
		t.Fatalf("events %q, want 5 tokens, usage and [DONE]", events)
	}
	var usage openai.ChatCompletionChunk
	if err := json.Unmarshal([]byte(events[5]), &usage); err != nil || usage.Usage == nil {
		t.Fatalf("usage event %q: %v", events[5], err)
	}
	if u := usage.Usage; u.PromptTokensDetails.CachedTokens != u.PromptTokens-1 {
		t.Errorf("usage %+v, want every prompt token but the last cached", u)
	}
}

func TestPrefillerHeaderThatIsNotAHostPortIsRefused(t *testing.T) {
	a := startSim(t, defaultSim())
	for _, bad := range []string{"10.0.0.1", "10.0.0.1:0", "10.0.0.1:http", ":8000", "10.0.0.1:8000/v1", "u@h:80", "h:70000", "https://h:80"} {
		var e openai.ErrorResponse
		status := postViaJSON(t, a+"/v1/completions", bad, `{"prompt":"hello"}`, &e)
		if status != http.StatusBadRequest || e.Error.Code != 400 || !strings.Contains(e.Error.Message, PrefillerHeader) {
			t.Errorf("header %q: %d %+v, want 400 naming the header", bad, status, e)
		}
	}
	if st := simStats(t, a); st.Requests != 0 {
		t.Errorf("%d requests reached the engine, want none", st.Requests)
	}
}

func TestPrefillPodFailures(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	failing := defaultSim()
	failing.faults.ErrorRate, failing.faults.ErrorStatus = 1, http.StatusServiceUnavailable
	notJSON := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "prefilled")
	}))
	t.Cleanup(notJSON.Close)
	otherModel := defaultSim()
	otherModel.served = []string{"other"}

	for name, tc := range map[string]struct {
		prefill string
		timeout time.Duration // the decode pod's prefill timeout (0: the default)
		// The client's answer; a served one is computed here.
		status  int
		message string
	}{
		"unreachable":           {prefill: gone.URL, status: http.StatusOK},
		"answers 503":           {prefill: startSim(t, failing), status: http.StatusOK},
		"times out":             {prefill: startSim(t, slowPrefill()), timeout: 50 * time.Millisecond, status: http.StatusOK},
		"answers 404":           {prefill: startSim(t, otherModel), status: http.StatusNotFound, message: "The model `sim-model` does not exist."},
		"answers 200, not JSON": {prefill: notJSON.URL, status: http.StatusBadRequest, message: "the prefill pod's answer"},
	} {
		t.Run(name, func(t *testing.T) {
			decode := defaultSim()
			decode.prefillTimeout = tc.timeout
			a := startSim(t, decode)
			resp, err := postVia(t.Context(), t, a+"/v1/completions", hostPort(tc.prefill), `{"model":"sim-model","prompt":"`+longPrefix+`","max_tokens":2}`)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			st := simStats(t, a)
			if tc.status != http.StatusOK {
				var e openai.ErrorResponse
				if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error.Code != tc.status || !strings.Contains(e.Error.Message, tc.message) {
					t.Errorf("error body %+v (%v), want code %d and a message with %q", e, err, tc.status, tc.message)
				}
				if st.Requests != 0 || st.Running != 0 || st.PrefillFallbacks != 0 {
					t.Errorf("decode pod stats %+v, want nothing started", st)
				}
				return
			}
			// Served here as llm-d's sidecar falls back: the prompt
			// computed, nothing transferred.
			var c openai.Completion
			if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.Usage.CompletionTokens != 2 {
				t.Errorf("answer %+v (%v), want 2 tokens", c, err)
			}
			m := metricsOf(t, a)
			if st.PrefillFallbacks != 1 || st.Prefilled != 0 || st.Finished != 1 || st.Running != 0 ||
				m["vllm:external_prefix_cache_hits_total"] != 0 || m["vllm:prefix_cache_queries_total"] != 145 {
				t.Errorf("decode pod stats %+v, external hits %g, queries %g; want one fallback served with its 145 prompt tokens computed",
					st, m["vllm:external_prefix_cache_hits_total"], m["vllm:prefix_cache_queries_total"])
			}
			if tc.timeout != 0 {
				eventually(t, "the timed-out prefill to be aborted", func() bool { return simStats(t, tc.prefill).Aborted == 1 })
			}
		})
	}
}

func TestClientLeavingCancelsThePrefill(t *testing.T) {
	a, b := startSim(t, defaultSim()), startSim(t, slowPrefill())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		resp, err := postVia(ctx, t, a+"/v1/completions", hostPort(b), `{"model":"sim-model","prompt":"hello there"}`)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	eventually(t, "the prefill pod to run the prefill", func() bool { return simStats(t, b).Running == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("client request ended with %v, want cancelled", err)
	}
	eventually(t, "the prefill to be aborted", func() bool { return simStats(t, b).Aborted == 1 })
	if st := simStats(t, a); st.Requests != 0 || st.Running != 0 {
		t.Errorf("decode pod stats %+v, want no request started", st)
	}
}

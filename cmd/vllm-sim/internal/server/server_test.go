package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/engine"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/faults"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/openai"
)

var longPrefix = strings.Repeat("You are a helpful assistant. ", 20) // 580 bytes

func TestSecondRequestWithSamePrefixIsCached(t *testing.T) {
	base := startSim(t, defaultSim())
	var first, second openai.Completion
	postJSON(t, base+"/v1/completions", `{"model":"sim-model","prompt":"`+longPrefix+`first?","max_tokens":3}`, &first)
	postJSON(t, base+"/v1/completions", `{"model":"sim-model","prompt":"`+longPrefix+`second?","max_tokens":3}`, &second)

	want := openai.Usage{PromptTokens: 147, CompletionTokens: 3, TotalTokens: 150,
		PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: 0}}
	if diff := cmp.Diff(&want, first.Usage); diff != "" {
		t.Errorf("first usage (-want +got):\n%s", diff)
	}
	// 580 shared bytes = 145 tokens = 36 full blocks of 4 tokens.
	want.PromptTokensDetails.CachedTokens = 144
	want.PromptTokens, want.TotalTokens = 147, 150
	if diff := cmp.Diff(&want, second.Usage); diff != "" {
		t.Errorf("second usage (-want +got):\n%s", diff)
	}
	if got := len(second.Choices[0].Text); got != 3*4 {
		t.Errorf("text %q has %d bytes, want 12 (3 tokens)", second.Choices[0].Text, got)
	}

	var st Stats
	getJSON(t, base+"/sim/stats", &st)
	if st.Requests != 2 || st.Finished != 2 || st.CachedTokens != 144 || st.HitRate <= 0 {
		t.Errorf("stats %+v, want 2 finished requests with 144 cached tokens", st)
	}
	m, err := scrape(t, base)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{
		"hits": m["vllm:prefix_cache_hits_total"], "queries": m["vllm:prefix_cache_queries_total"],
		"success": m["vllm:request_success_total"], "ttft": m["vllm:time_to_first_token_seconds_count"],
		"prefills": m["vllm:request_prefill_time_seconds_count"], "itl": m["vllm:inter_token_latency_seconds_count"],
	}
	// Two requests of 3 tokens: two prefills, two gaps between tokens each.
	wantM := map[string]float64{"hits": 144, "queries": 294, "success": 2, "ttft": 2, "prefills": 2, "itl": 4}
	if diff := cmp.Diff(wantM, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	// No prefill outlasts its time to first token.
	if pre, ttft := m["vllm:request_prefill_time_seconds_sum"], m["vllm:time_to_first_token_seconds_sum"]; pre < 0 || pre > ttft {
		t.Errorf("prefill time sum %g, want in [0, TTFT sum %g]", pre, ttft)
	}
}

func TestChatConversationReusesEarlierTurns(t *testing.T) {
	base := startSim(t, defaultSim())
	turn1 := `{"role":"system","content":"` + longPrefix + `"},{"role":"user","content":"hello"}`
	var a, b openai.ChatCompletion
	postJSON(t, base+"/v1/chat/completions", `{"messages":[`+turn1+`],"max_completion_tokens":4}`, &a)
	turn2 := turn1 + `,{"role":"assistant","content":` + mustJSON(t, a.Choices[0].Message.Content) + `},{"role":"user","content":[{"type":"text","text":"more"}]}`
	postJSON(t, base+"/v1/chat/completions", `{"messages":[`+turn2+`]}`, &b)
	if got := b.Usage.PromptTokensDetails.CachedTokens; got < a.Usage.PromptTokens-4 {
		t.Errorf("turn 2 cached %d tokens, want at least turn 1's prompt less a block (%d)", got, a.Usage.PromptTokens-4)
	}
	if b.Usage.CompletionTokens != 16 || b.Choices[0].Message.Role != "assistant" {
		t.Errorf("turn 2 = %+v, want 16 default tokens from the assistant", b)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestChatStreamFormat(t *testing.T) {
	base := startSim(t, defaultSim())
	resp := post(t.Context(), t, base+"/v1/chat/completions",
		`{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	events := readAllEvents(t, resp.Body)
	if len(events) != 5 || events[4] != "[DONE]" {
		t.Fatalf("events = %q, want 3 tokens, usage, [DONE]", events)
	}
	var content strings.Builder
	for i, ev := range events[:3] {
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if c.Object != "chat.completion.chunk" || len(c.Choices) != 1 || c.Usage != nil {
			t.Fatalf("event %d = %s", i, ev)
		}
		content.WriteString(c.Choices[0].Delta.Content)
		if last := i == 2; (c.Choices[0].FinishReason != nil) != last {
			t.Errorf("event %d finish_reason = %v, want set only on the last token", i, c.Choices[0].FinishReason)
		}
	}
	if content.Len() != 12 {
		t.Errorf("streamed content %q, want 3 tokens of 4 bytes", content.String())
	}
	var usage struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   openai.Usage      `json:"usage"`
	}
	if err := json.Unmarshal([]byte(events[3]), &usage); err != nil {
		t.Fatal(err)
	}
	if usage.Choices == nil || len(usage.Choices) != 0 || usage.Usage.CompletionTokens != 3 || usage.Usage.PromptTokensDetails == nil {
		t.Errorf("usage event = %s, want empty choices and usage with details", events[3])
	}
}

func TestCompletionStreamOfTwoPrompts(t *testing.T) {
	base := startSim(t, defaultSim())
	resp := post(t.Context(), t, base+"/v1/completions", `{"prompt":["one","two"],"max_tokens":2,"stream":true}`)
	defer resp.Body.Close()
	events := readAllEvents(t, resp.Body)
	if len(events) != 5 || events[4] != "[DONE]" {
		t.Fatalf("events = %q, want 2×2 tokens then [DONE] (no usage)", events)
	}
	perChoice := map[int]int{}
	for _, ev := range events[:4] {
		var c openai.Completion
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "text_completion" || c.Choices[0].Text == "" {
			t.Errorf("event %s", ev)
		}
		perChoice[c.Choices[0].Index]++
	}
	if diff := cmp.Diff(map[int]int{0: 2, 1: 2}, perChoice); diff != "" {
		t.Errorf("tokens per choice (-want +got):\n%s", diff)
	}
	// vLLM times each prompt of a batch as a request of its own.
	m, err := scrape(t, base)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"vllm:time_to_first_token_seconds_count", "vllm:request_prefill_time_seconds_count",
		"vllm:e2e_request_latency_seconds_count"} {
		if m[name] != 2 {
			t.Errorf("%s = %v, want 2 (one per prompt)", name, m[name])
		}
	}
}

func TestErrorsAndInfoEndpoints(t *testing.T) {
	base := startSim(t, defaultSim())
	cases := map[string]struct {
		path, body string
		wantStatus int
		wantType   string
	}{
		"unknown model":         {path: "/v1/completions", body: `{"model":"gpt-x","prompt":"a"}`, wantStatus: 404, wantType: "NotFoundError"},
		"unknown chat model":    {path: "/v1/chat/completions", body: `{"model":"gpt-x","messages":[{"role":"user","content":"a"}]}`, wantStatus: 404, wantType: "NotFoundError"},
		"bad json":              {path: "/v1/completions", body: `{"prompt":`, wantStatus: 400, wantType: "BadRequestError"},
		"no messages":           {path: "/v1/chat/completions", body: `{"messages":[]}`, wantStatus: 400, wantType: "BadRequestError"},
		"larger than the cache": {path: "/v1/completions", body: `{"prompt":"` + strings.Repeat("x", 9000) + `"}`, wantStatus: 400, wantType: "BadRequestError"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got openai.ErrorResponse
			status := postJSON(t, base+tc.path, tc.body, &got)
			if status != tc.wantStatus || got.Error.Type != tc.wantType || got.Error.Code != tc.wantStatus {
				t.Errorf("status %d body %+v, want %d %s", status, got, tc.wantStatus, tc.wantType)
			}
		})
	}

	var models openai.ModelList
	getJSON(t, base+"/v1/models", &models)
	if len(models.Data) != 1 || models.Data[0].ID != testModel {
		t.Errorf("models = %+v", models)
	}
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health status %d", resp.StatusCode)
	}
}

func TestMetricsExposeCacheConfig(t *testing.T) {
	base := startSim(t, defaultSim())
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`vllm:cache_config_info{block_size="4",cache_dtype="auto",enable_prefix_caching="True",num_gpu_blocks="512"} 1`,
		`vllm:num_requests_running{engine="0",model_name="sim-model"} 0`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="sim-model"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// openStream starts a streamed completion and waits for its first token.
func openStream(ctx context.Context, t *testing.T, base, prompt string) *bufio.Reader {
	t.Helper()
	resp := post(ctx, t, base+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":1500,"stream":true}`)
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
	if _, err := readEvent(br); err != nil {
		t.Fatalf("first event of %q: %v", prompt, err)
	}
	return br
}

func TestQueueingAndAbortFreesTheSlot(t *testing.T) {
	o := defaultSim()
	o.engine.MaxNumSeqs = 1
	o.scale = 1 // 1500 tokens × 20 ms: the streams outlive the test
	base := startSim(t, o)

	running := func(wantRunning, wantWaiting float64) func() bool {
		return func() bool {
			m, err := scrape(t, base)
			if err != nil {
				t.Logf("scrape: %v", err)
			}
			return err == nil && m["vllm:num_requests_running"] == wantRunning && m["vllm:num_requests_waiting"] == wantWaiting
		}
	}
	ctx1, cancel1 := context.WithCancel(t.Context())
	openStream(ctx1, t, base, "first")

	secondStarted := make(chan error, 1)
	ctx2, cancel2 := context.WithCancel(t.Context())
	defer cancel2()
	go func() {
		resp, err := http.DefaultClient.Do(mustRequest(ctx2, t, base, `{"prompt":"second","max_tokens":1500,"stream":true}`))
		if err != nil {
			secondStarted <- err
			return
		}
		defer resp.Body.Close()
		_, err = readEvent(bufio.NewReader(resp.Body))
		secondStarted <- err
		<-ctx2.Done() // keep reading side open: closing the body would abort it
	}()
	eventually(t, "running=1 waiting=1", running(1, 1))

	cancel1()
	if err := <-secondStarted; err != nil {
		t.Fatalf("second stream after the first was cancelled: %v", err)
	}
	eventually(t, "running=1 waiting=0", running(1, 0))
	cancel2()
	eventually(t, "running=0", running(0, 0))
	var st Stats
	getJSON(t, base+"/sim/stats", &st)
	if st.Aborted != 2 || st.KVCacheUsage != 0 {
		t.Errorf("stats %+v, want 2 aborted and no KV blocks held", st)
	}
}

func mustRequest(ctx context.Context, t *testing.T, base, body string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Error(err)
	}
	return req
}

// TestEngineStopEndsRequestsWithAnError stops the engine (the simulator's
// SIGTERM) under a request and a stream in flight: the request is answered
// 503 and the stream ends with an error event and [DONE], as vLLM ends work
// its engine failed, never as a completion.
func TestEngineStopEndsRequestsWithAnError(t *testing.T) {
	o := defaultSim()
	o.scale = 1 // 1500 tokens × 20 ms: the requests outlive the test
	eng, err := engine.New(o.engine, engine.WithPacer(&engine.WallPacer{Scale: o.scale}))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Model: testModel, Engine: eng, Faults: faults.NewState(o.faults, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stopEngine := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() { defer close(stopped); eng.Run(ctx) }()
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		stopEngine()
		<-stopped
		ts.Close()
	})

	type answer struct {
		status int
		body   string
		err    error
	}
	ask := func(body string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			resp, err := http.DefaultClient.Do(mustRequest(t.Context(), t, ts.URL, body))
			if err != nil {
				ch <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			ch <- answer{status: resp.StatusCode, body: string(b), err: err}
		}()
		return ch
	}
	plain := ask(`{"prompt":"plain","max_tokens":1500}`)
	streamed := ask(`{"prompt":"streamed","max_tokens":1500,"stream":true}`)
	eventually(t, "both requests in the engine", func() bool {
		m, err := scrape(t, ts.URL)
		return err == nil && m["vllm:num_requests_running"]+m["vllm:num_requests_waiting"] == 2
	})
	stopEngine()
	<-stopped

	p := <-plain
	var perr struct {
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if p.err != nil || p.status != http.StatusServiceUnavailable || json.Unmarshal([]byte(p.body), &perr) != nil || perr.Error.Code != http.StatusServiceUnavailable {
		t.Errorf("request cut by the engine stopping: status %d, body %q, error %v; want 503 with an error body", p.status, p.body, p.err)
	}
	s := <-streamed
	events := strings.Split(strings.TrimSuffix(s.body, "\n\n"), "\n\n")
	if s.err != nil || len(events) < 2 || events[len(events)-1] != "data: [DONE]" || !strings.HasPrefix(events[len(events)-2], `data: {"error":`) {
		t.Errorf("stream cut by the engine stopping (err %v) ends with %q; want an error event, then [DONE]", s.err, events[max(0, len(events)-2):])
	}
}

package server

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/openai"
)

func loraSim() simOptions {
	o := defaultSim()
	o.engine.MaxLoRAs, o.engine.MaxCPULoRAs, o.engine.LoRALoadCost = 2, 2, 100*time.Millisecond
	o.served = []string{"llama", "llama-alias"}
	o.lora = []LoRAModule{{Name: "sql", Path: "/adapters/sql"}, {Name: "chat", Path: "/adapters/chat", Base: "llama-alias"}}
	return o
}

func postText(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp := post(t.Context(), t, url, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func modelIDs(t *testing.T, base string) map[string]string {
	t.Helper()
	var list openai.ModelList
	getJSON(t, base+"/v1/models", &list)
	out := map[string]string{}
	for _, m := range list.Data {
		parent := "<null>"
		if m.Parent != nil {
			parent = *m.Parent
		}
		out[m.ID] = parent
	}
	return out
}

func TestModelsListBasesAndAdaptersWithParents(t *testing.T) {
	base := startSim(t, loraSim())
	want := map[string]string{"llama": "<null>", "llama-alias": "<null>", "sql": "llama", "chat": "llama-alias"}
	if diff := cmp.Diff(want, modelIDs(t, base)); diff != "" {
		t.Errorf("/v1/models id → parent (-want +got):\n%s", diff)
	}
}

func TestRequestsByModelName(t *testing.T) {
	base := startSim(t, loraSim())
	cases := map[string]struct {
		model      string
		wantStatus int
		wantEcho   string
	}{
		"first served name":  {model: "llama", wantStatus: 200, wantEcho: "llama"},
		"second served name": {model: "llama-alias", wantStatus: 200, wantEcho: "llama"},
		"adapter":            {model: "sql", wantStatus: 200, wantEcho: "sql"},
		"unknown":            {model: "qwen", wantStatus: 404},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got struct {
				Model string             `json:"model"`
				Error openai.ErrorDetail `json:"error"`
			}
			status := postJSON(t, base+"/v1/completions", `{"model":"`+tc.model+`","prompt":"hello","max_tokens":1}`, &got)
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d", status, tc.wantStatus)
			}
			if tc.wantStatus == 404 {
				wantErr := openai.ErrorDetail{Message: "The model `qwen` does not exist.", Type: "NotFoundError", Param: ptr("model"), Code: 404}
				if diff := cmp.Diff(wantErr, got.Error); diff != "" {
					t.Errorf("error body (-want +got):\n%s", diff)
				}
				return
			}
			if got.Model != tc.wantEcho {
				t.Errorf("response model %q, want %q", got.Model, tc.wantEcho)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestRuntimeLoadAndUnloadAdapter(t *testing.T) {
	base := startSim(t, loraSim())
	steps := []struct {
		path, body string
		wantStatus int
		wantBody   string
	}{
		{"/v1/load_lora_adapter", `{"lora_name":"tool","lora_path":"/adapters/tool"}`, 200, "Success: LoRA adapter 'tool' added successfully."},
		{"/v1/load_lora_adapter", `{"lora_name":"tool","lora_path":"/adapters/tool"}`, 400, `"message":"The lora adapter 'tool' has already been loaded."`},
		{"/v1/load_lora_adapter", `{"lora_name":"x"}`, 400, `"message":"Both 'lora_name' and 'lora_path' must be provided."`},
		{"/v1/unload_lora_adapter", `{"lora_name":"sql"}`, 200, "Success: LoRA adapter 'sql' removed successfully."},
		{"/v1/unload_lora_adapter", `{"lora_name":"sql"}`, 404, `"message":"The lora adapter 'sql' cannot be found."`},
	}
	for _, s := range steps {
		status, body := postText(t, base+s.path, s.body)
		if status != s.wantStatus || !strings.Contains(body, s.wantBody) {
			t.Errorf("POST %s %s: %d %q, want %d with %q", s.path, s.body, status, body, s.wantStatus, s.wantBody)
		}
	}
	want := map[string]string{"llama": "<null>", "llama-alias": "<null>", "chat": "llama-alias", "tool": "llama"}
	if diff := cmp.Diff(want, modelIDs(t, base)); diff != "" {
		t.Errorf("/v1/models after load and unload (-want +got):\n%s", diff)
	}
	if status := postJSON(t, base+"/v1/completions", `{"model":"sql","prompt":"a"}`, nil); status != 404 {
		t.Errorf("request for the unloaded adapter: status %d, want 404", status)
	}
	if status := postJSON(t, base+"/v1/completions", `{"model":"tool","prompt":"a","max_tokens":1}`, nil); status != 200 {
		t.Errorf("request for the loaded adapter: status %d, want 200", status)
	}
}

var loraInfoLine = regexp.MustCompile(`(?m)^vllm:lora_requests_info\{engine="0",max_lora="2",running_lora_adapters="([^"]*)",waiting_lora_adapters="([^"]*)"\} (\S+)$`)

// vllm:lora_requests_info is a gauge per combination of running and
// waiting adapters, valued with the time it was last current; the adapter
// loads show in /sim/stats.
func TestLoRAMetricsAndStats(t *testing.T) {
	o := loraSim()
	o.engine.MaxNumSeqs = 1
	o.scale = 1 // 1500 tokens × 20 ms: the streams outlive the test
	base := startSim(t, o)
	before := time.Now()
	// One long request for sql holds the only slot; one for chat waits
	// (its answer does not start, so it is sent from a goroutine).
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, model := range []string{"sql", "chat"} {
		if i == 1 {
			eventually(t, "sql running", func() bool { m, err := scrape(t, base); return err == nil && m["vllm:num_requests_running"] == 1 })
		}
		wg.Go(func() {
			resp, err := http.DefaultClient.Do(mustRequest(ctx, t, base, `{"model":"`+model+`","prompt":"hello","max_tokens":1500,"stream":true}`))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	var running, waiting string
	var value float64
	eventually(t, "sql running and chat waiting in the metric", func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		matches := loraInfoLine.FindAllStringSubmatch(string(body), -1)
		if len(matches) == 0 {
			return false
		}
		// The newest series is the present state.
		best := matches[0]
		for _, m := range matches {
			if m[3] > best[3] {
				best = m
			}
		}
		running, waiting = best[1], best[2]
		value, _ = strconv.ParseFloat(best[3], 64)
		return running == "sql" && waiting == "chat"
	})
	if at := time.Unix(0, int64(value*1e9)); at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("lora_requests_info value %v is not the current time", value)
	}
	var st Stats
	getJSON(t, base+"/sim/stats", &st)
	if st.LoRALoads != 0 {
		t.Errorf("lora_loads = %d, want 0: both adapters were loaded at start", st.LoRALoads)
	}
}

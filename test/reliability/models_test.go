package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/framework"
)

// TestTwoModelsAndAdaptersLandOnServingPods runs two vLLM simulators of
// base model llama (adapters sql and chat) and two of qwen (adapter tool)
// behind one picker: every request reaches a pod that serves its model or
// adapter, and a model no pod serves gets the picker's 404.
func TestTwoModelsAndAdaptersLandOnServingPods(t *testing.T) {
	hosts := []string{"127.0.0.90", "127.0.0.91", "127.0.0.92", "127.0.0.93"}
	port := framework.FreePortT(t, hosts...)
	lora := []string{"--max-loras", "2", "--lora-load-ms", "50"}
	sims := []*sim{
		startSim(t, hosts[0], port, append([]string{"--served-model-name", "llama", "--lora-modules", "sql=/a/sql chat=/a/chat"}, lora...)...),
		startSim(t, hosts[1], port, append([]string{"--served-model-name", "llama", "--lora-modules", "sql=/a/sql chat=/a/chat"}, lora...)...),
		startSim(t, hosts[2], port, append([]string{"--served-model-name", "qwen", "--lora-modules", "tool=/a/tool"}, lora...)...),
		startSim(t, hosts[3], port, append([]string{"--served-model-name", "qwen", "--lora-modules", "tool=/a/tool"}, lora...)...),
	}
	var addrs []string
	for _, s := range sims {
		addrs = append(addrs, s.addr)
	}
	p := startPicker(t, "--static-endpoints", strings.Join(addrs, ","), "--refresh-models-interval", "200ms")
	// Every worker's models known: a pick can filter from then on.
	eventually(t, 30*time.Second, func() error {
		v, err := p.Workers()
		if err != nil {
			return err
		}
		for _, w := range v.Workers {
			if len(w.Models) == 0 {
				return fmt.Errorf("%s has reported no models yet", w.Address)
			}
		}
		if len(v.Workers) != len(sims) {
			return fmt.Errorf("%d workers, want %d", len(v.Workers), len(sims))
		}
		return nil
	})
	g := startGateway(t, p.Addr())

	servers := map[string][]string{
		"llama": addrs[:2], "sql": addrs[:2], "chat": addrs[:2],
		"qwen": addrs[2:], "tool": addrs[2:],
	}
	models := []string{"llama", "sql", "chat", "qwen", "tool"}
	const perModel = 8
	for i := range perModel * len(models) {
		model := models[i%len(models)]
		body, _ := json.Marshal(map[string]any{"model": model, "prompt": fmt.Sprintf("question %d for %s", i, model), "max_tokens": 4})
		status, answer, err := g.Complete(t.Context(), body)
		if err != nil || status != 200 {
			t.Fatalf("request %d for %s: %d %s %v", i, model, status, answer, err)
		}
		var got struct {
			Model string `json:"model"`
		}
		if err := json.Unmarshal([]byte(answer), &got); err != nil || got.Model != model {
			t.Errorf("request %d for %s answered for model %q (%v)", i, model, got.Model, err)
		}
	}
	recs := g.WaitRecords(t, perModel*len(models))
	for i, r := range recs {
		model := models[i%len(models)]
		if !slices.Contains(servers[model], r.Served) {
			t.Errorf("request %d for %s served by %s, which does not serve it (servers %v)", i, model, r.Served, servers[model])
		}
	}
	// Each pair of simulators got exactly its models' requests.
	var llamaSide, qwenSide int64
	for i, s := range sims {
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			llamaSide += st.Requests
		} else {
			qwenSide += st.Requests
		}
	}
	if llamaSide != 3*perModel || qwenSide != 2*perModel {
		t.Errorf("llama pods got %d requests, qwen pods %d; want %d and %d", llamaSide, qwenSide, 3*perModel, 2*perModel)
	}

	// A model no pod serves: the picker answers 404 itself.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"model": "mistral", "prompt": "hello", "max_tokens": 4})
	status, answer, err := g.Complete(ctx, body)
	if err != nil || status != 404 {
		t.Fatalf("request for an unknown model: %d %s %v, want 404", status, answer, err)
	}
	var apiErr struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(answer), &apiErr); err != nil || apiErr.Error.Type != "not_found_error" ||
		apiErr.Error.Code != 404 || !strings.Contains(apiErr.Error.Message, "`mistral`") {
		t.Errorf("404 body %s is not the picker's OpenAI error naming the model", answer)
	}
	if r := g.WaitRecords(t, perModel*len(models)+1); !r[len(r)-1].Immediate {
		t.Errorf("the unknown model's request reached an endpoint (%+v), want a local reply", r[len(r)-1].Record)
	}
	if !strings.Contains(p.Output(), "mistral") {
		t.Errorf("the picker's log does not name the unknown model")
	}
}

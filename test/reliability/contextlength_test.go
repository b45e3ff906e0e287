package reliability

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/test/framework"
)

// TestContextLengthRouting runs llm-d's context-length routing end to end:
// pods labelled llm-d.ai/context-length-range on a real API server,
// simulators behind them and a picker that filters by the label behind the
// gateway stand-in. A long prompt is served by the long-context pods, a
// short one by the short-context pod, and a prompt longer than every range
// is answered 400 by the picker and reaches no pod. A label edited on a
// running pod is followed: /debug/workers shows the new range, and the
// prompts it now takes go there. Every load ends at 0.
func TestContextLengthRouting(t *testing.T) {
	c := sharedCluster(t)
	ns := c.Namespace(t)
	const short, long, wide = "127.0.0.140", "127.0.0.141", "127.0.0.142"
	hosts := []string{short, long, wide}
	port := framework.FreePortT(t, hosts...)
	for _, h := range hosts {
		startSim(t, h, port)
	}
	if err := c.Client.Create(t.Context(), framework.MakePool(ns, "pool").Ports(int32(port)).Obj()); err != nil {
		t.Fatal(err)
	}
	c.ReadyPod(t, framework.MakePod(ns, "vllm-short").Label(policy.DefaultContextLengthLabel, "0-1024").Obj(), short)
	c.ReadyPod(t, framework.MakePod(ns, "vllm-long").Label(policy.DefaultContextLengthLabel, "1024-16384").Obj(), long)
	edited := c.ReadyPod(t, framework.MakePod(ns, "vllm-wide").Label(policy.DefaultContextLengthLabel, "1024-8192").Obj(), wide)
	p := startClusterPicker(t, c, ns, "pool", "--fallbacks", "2", "--config-text",
		"policy:\n  name: weighted-scorer\n  contextLength: {filter: true}\n  weightedScorer: {contextLengthWeight: 1}\n")
	p.WaitWorkers(t, len(hosts))
	g := startGateway(t, p.Addr())
	addr := func(h string) string { return net.JoinHostPort(h, strconv.Itoa(port)) }

	sent := 0
	// send posts a completion of about tokens tokens (4 bytes each) and
	// returns the reply's status and body, and the endpoints the picker
	// named for it.
	send := func(tokens int) (int, string, []string) {
		t.Helper()
		resp, err := g.Post(t.Context(), "/v1/completions", completion(strings.Repeat("abc ", tokens), 4, false), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		sent++
		return resp.StatusCode, string(body), g.WaitRecords(t, sent)[sent-1].Endpoints
	}
	// routes checks that prompts of tokens tokens are sent to the pods of
	// want alone, fallbacks included, and served.
	routes := func(tokens int, want ...string) {
		t.Helper()
		for range 4 {
			status, body, endpoints := send(tokens)
			if status != 200 {
				t.Fatalf("a prompt of %d tokens: status %d: %s", tokens, status, body)
			}
			var named []string
			for _, h := range want {
				named = append(named, addr(h))
			}
			for _, e := range endpoints {
				if !strings.Contains(strings.Join(named, ","), e) {
					t.Errorf("a prompt of %d tokens was sent to %v, want only %v", tokens, endpoints, named)
				}
			}
		}
	}
	routes(200, short)
	routes(3000, long, wide)
	routes(12000, long)

	status, body, endpoints := send(20000)
	if status != 400 || !strings.Contains(body, "longer than every endpoint of the pool takes") || len(endpoints) != 0 {
		t.Errorf("a prompt longer than every range: status %d, %q, sent to %v; want 400 saying so, sent nowhere", status, body, endpoints)
	}

	patch := client.MergeFrom(edited.DeepCopy())
	edited.Labels[policy.DefaultContextLengthLabel] = "0-32768"
	if err := c.Client.Patch(t.Context(), edited, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		w, err := p.Worker(addr(wide))
		if err != nil {
			return err
		}
		if w.ContextLength != "0-32768" {
			return fmt.Errorf("%s shows range %q, want 0-32768", addr(wide), w.ContextLength)
		}
		return nil
	})
	routes(20000, wide)
	routes(200, short, wide)
	p.WaitWorkers(t, len(hosts))
	p.WaitIdle(t, 30*time.Second)
	checkReleases(t, p)
}

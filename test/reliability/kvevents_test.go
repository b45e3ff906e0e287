package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/framework"
)

// TestReplicasFindPromptsOthersPlaced runs two pickers over the same four
// simulated pods, each with its own gateway and index, both subscribed to
// the pods' KV-cache events. A long prompt sent through the first picker
// is cached on the pod it chose; the same prompt sent through the second,
// which never routed it, must land on a pod that holds it: the server
// reports the prompt cached. Every other prompt carries a cache salt, which
// the servers key its blocks by and publish with them. With six prompts, a
// picker guessing among four pods would be right for all six about once in
// 4,096 runs.
func TestReplicasFindPromptsOthersPlaced(t *testing.T) {
	hosts := []string{"127.0.0.110", "127.0.0.111", "127.0.0.112", "127.0.0.113"}
	_, pickers, gws := pickersOverEventPods(t, hosts)

	r := rand.New(rand.NewPCG(7, 11))
	for i := range 6 {
		prompt := randomPrompt(r, 400) // about 5 KB: 80 blocks of the simulator's 16 tokens
		salt := ""
		if i%2 == 1 {
			salt = fmt.Sprintf("tenant-%d", i)
		}
		before := kvBlocks(t, pickers[1])
		first := cachedTokens(t, gws[0], prompt, salt)
		if first != 0 {
			t.Fatalf("prompt %d: %d tokens cached on its first request, want none", i, first)
		}
		// The events of its blocks reach the second picker.
		eventually(t, 10*time.Second, func() error {
			if n := kvBlocks(t, pickers[1]); n < before+70 {
				return fmt.Errorf("the second picker knows %v blocks, want %v", n, before+70)
			}
			return nil
		})
		again := cachedTokens(t, gws[1], prompt, salt)
		if least := 70 * 16; again < least {
			t.Errorf("prompt %d (salt %q) through the other picker: %d tokens cached, want at least %d (the pod the first picker chose)", i, salt, again, least)
		}
	}
	// /debug/workers gives each pod's share of the blocks the events tell
	// (read between two readings of the total that agree: the last
	// request's events may still be arriving).
	eventually(t, 10*time.Second, func() error {
		before := kvBlocks(t, pickers[1])
		v, err := pickers[1].Workers()
		if err != nil {
			return err
		}
		perPod := 0
		for _, w := range v.Workers {
			if w.KVEventBlocks == nil {
				t.Fatalf("/debug/workers lists %s without its KV-event blocks", w.Address)
			}
			perPod += *w.KVEventBlocks
		}
		if after := kvBlocks(t, pickers[1]); after != before || float64(perPod) != after || perPod < 6*70 {
			return fmt.Errorf("/debug/workers: %d KV-event blocks over the pods, inferpick_kv_events_blocks %v then %v, want the same and at least %d",
				perPod, before, after, 6*70)
		}
		return nil
	})
	m, err := pickers[1].Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if n := m.Sum("inferpick_kv_events_lookups_total"); n < 6 || m.Sum("inferpick_kv_events_lookup_failures_total") != 0 {
		t.Errorf("the second picker looked up %v prompts (%v failed), want at least 6, none failed",
			n, m.Sum("inferpick_kv_events_lookup_failures_total"))
	}
}

// TestAPickerStartedLaterReadsTheCachesFromTheReplay: pods whose servers
// keep their event batches (vLLM's replay_endpoint) serve six prompts
// through one picker; a picker started afterwards with
// --kv-events-replay-port knows, before any further event, every block
// the first one's prompts left, and routes each of them to a pod that
// holds it. One started without it knows none of them.
func TestAPickerStartedLaterReadsTheCachesFromTheReplay(t *testing.T) {
	hosts := []string{"127.0.0.114", "127.0.0.115", "127.0.0.116", "127.0.0.117"}
	// The framework never hands out a port twice.
	port, kvPort, replayPort := framework.FreePortT(t, hosts...), framework.FreePortT(t, hosts...), framework.FreePortT(t, hosts...)
	events := fmt.Sprintf(`{"enable_kv_cache_events":true,"endpoint":"tcp://*:%d","replay_endpoint":"tcp://*:%d"}`, kvPort, replayPort)
	var addrs []string
	for _, h := range hosts {
		addrs = append(addrs, startSim(t, h, port, "--kv-events-config", events).addr)
	}
	args := []string{"--static-endpoints", strings.Join(addrs, ","), "--kv-events-port", strconv.Itoa(kvPort)}
	first := startPicker(t, args...)
	first.WaitWorkers(t, len(hosts))
	g := startGateway(t, first.Addr())
	r := rand.New(rand.NewPCG(5, 13))
	var prompts []string
	for range 6 {
		prompts = append(prompts, randomPrompt(r, 400)) // about 80 blocks each
		if n := cachedTokens(t, g, prompts[len(prompts)-1], ""); n != 0 {
			t.Fatalf("a new prompt found %d tokens cached", n)
		}
	}
	eventually(t, 10*time.Second, func() error {
		if n := kvBlocks(t, first); n < 6*70 {
			return fmt.Errorf("the first picker knows %v blocks, want at least %d", n, 6*70)
		}
		return nil
	})

	without := startPicker(t, args...)
	later := startPicker(t, append(args, "--kv-events-replay-port", strconv.Itoa(replayPort))...)
	for _, p := range []*picker{without, later} {
		p.WaitWorkers(t, len(hosts))
		waitSubscriptions(t, p, len(hosts))
	}
	eventually(t, 10*time.Second, func() error {
		if n := kvBlocks(t, later); n < 6*70 {
			return fmt.Errorf("the picker started later knows %v blocks, want at least %d", n, 6*70)
		}
		return nil
	})
	if n := kvBlocks(t, without); n != 0 {
		t.Errorf("the picker started later without replay knows %v blocks, want 0 (no event since it subscribed)", n)
	}
	m, err := later.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if whole, all := m.Sum("inferpick_kv_events_replays_total", "result", "whole"), m.Sum("inferpick_kv_events_replays_total"); whole != float64(len(hosts)) || all != whole {
		t.Errorf("replays: %v whole of %v, want one whole per pod (%d)", whole, all, len(hosts))
	}
	gl := startGateway(t, later.Addr())
	for i, prompt := range prompts {
		if n, least := cachedTokens(t, gl, prompt, ""), 70*16; n < least {
			t.Errorf("prompt %d through the picker started later: %d tokens cached, want at least %d", i, n, least)
		}
	}
}

// pickersOverEventPods starts a simulator on each host, publishing its
// KV-cache events (with more flags, extra), and two pickers that subscribe
// to them, each behind a gateway of its own; it returns once both follow
// every pod's events.
func pickersOverEventPods(t *testing.T, hosts []string, extra ...string) (sims []*sim, pickers [2]*picker, gws [2]*gw) {
	t.Helper()
	port := framework.FreePortT(t, hosts...)
	kvPort := framework.FreePortT(t, hosts...) // never port: the framework hands a port out once
	events := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:%d"}`, kvPort)
	var addrs []string
	for _, h := range hosts {
		s := startSim(t, h, port, append([]string{"--kv-events-config", events}, extra...)...)
		sims = append(sims, s)
		addrs = append(addrs, s.addr)
	}
	for i := range pickers {
		pickers[i] = startPicker(t, "--static-endpoints", strings.Join(addrs, ","), "--kv-events-port", strconv.Itoa(kvPort))
		pickers[i].WaitWorkers(t, len(hosts))
		gws[i] = startGateway(t, pickers[i].Addr())
	}
	for _, p := range pickers {
		waitSubscriptions(t, p, len(hosts))
	}
	return sims, pickers, gws
}

// waitSubscriptions waits until the picker follows n engines' events
// (one per pod, unless a pod runs several engines behind its port).
func waitSubscriptions(t *testing.T, p *picker, n int) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		m, err := p.Metrics()
		if err != nil {
			return err
		}
		if got := m.Sum("inferpick_kv_events_subscriptions"); got != float64(n) {
			return fmt.Errorf("the picker follows %v engines' events, want %d", got, n)
		}
		return nil
	})
}

// kvBlocks is the KV blocks the picker's events say the servers hold.
func kvBlocks(t *testing.T, p *picker) float64 {
	t.Helper()
	m, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	return m.Sum("inferpick_kv_events_blocks")
}

// cachedTokens sends a completion of prompt (with the cache salt, unless
// "") through g and returns the prompt tokens the server found cached.
func cachedTokens(t *testing.T, g *gw, prompt, salt string) int {
	t.Helper()
	req := completion(prompt, 1, false)
	if salt != "" {
		s, _ := json.Marshal(salt) // a string always marshals
		req = append(append([]byte(`{"cache_salt":`), s...), append([]byte{','}, req[1:]...)...)
	}
	code, body, err := g.Complete(t.Context(), req)
	if err != nil || code != http.StatusOK {
		t.Fatalf("completion: %d %v %.200s", code, err, body)
	}
	var resp struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("completion answer: %v: %.200s", err, body)
	}
	return resp.Usage.Details.Cached
}

// TestPickerFollowsEnginesBehindOnePort serves one pod whose port fronts two
// data-parallel engines, each publishing its KV-cache events on the events
// port plus its rank: engines 0 and 1 (vllm-sim --data-parallel-size 2, as
// vLLM's internal balancer runs them), or engines 2 and 3 of a deployment
// of 4 (one node of vLLM's hybrid balancer). The picker reads the engines
// from the pod's metrics and follows both: a request that reaches the
// second engine, the first being busy, is in the picker's index as much as
// one on the first, so the index holds every block both engines cache.
func TestPickerFollowsEnginesBehindOnePort(t *testing.T) {
	for name, tc := range map[string]struct {
		host  string
		ports int // the events ports from the base on: as many as the last rank's
		args  []string
	}{
		"internal balancer":    {"127.0.0.114", 2, []string{"--data-parallel-size", "2"}},
		"a node of the hybrid": {"127.0.0.115", 4, []string{"--data-parallel-size", "4", "--data-parallel-size-local", "2", "--data-parallel-start-rank", "2"}},
	} {
		t.Run(name, func(t *testing.T) {
			followsTwoEngines(t, tc.host, tc.ports, tc.args)
		})
	}
}

func followsTwoEngines(t *testing.T, host string, ports int, args []string) {
	port := framework.FreePortT(t, host)
	kvPort := framework.ConsecutivePortsT(t, host, ports)
	events := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:%d"}`, kvPort)
	s := startSim(t, host, port, append([]string{"--kv-events-config", events}, args...)...)
	p := startPicker(t, "--static-endpoints", s.addr, "--kv-events-port", strconv.Itoa(kvPort))
	p.WaitWorkers(t, 1)
	g := startGateway(t, p.Addr())
	waitSubscriptions(t, p, 2)

	// A long request holds the first engine, so the next goes to the second.
	r := rand.New(rand.NewPCG(3, 5))
	ctx, cancel := context.WithCancel(t.Context())
	held := make(chan struct{})
	go func() {
		defer close(held)
		resp, err := g.Post(ctx, "/v1/completions", completion(randomPrompt(r, 100), 4000, true), nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}()
	t.Cleanup(func() { cancel(); <-held })
	eventually(t, 10*time.Second, func() error {
		st, err := s.Stats()
		if err != nil {
			return err
		}
		if st.Running != 1 {
			return fmt.Errorf("the simulator runs %d requests, want the long one", st.Running)
		}
		return nil
	})
	cachedTokens(t, g, randomPrompt(r, 100), "")

	eventually(t, 10*time.Second, func() error {
		st, err := s.Stats()
		if err != nil {
			return err
		}
		if n := kvBlocks(t, p); n != float64(st.CachedBlocks) || st.CachedBlocks == 0 {
			return fmt.Errorf("the picker's index holds %v blocks, the engines cache %d", n, st.CachedBlocks)
		}
		return nil
	})
}

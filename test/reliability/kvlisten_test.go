package reliability

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferpick/inferpick/test/framework"
)

// TestPodsThatConnectToThePickerSteerRouting runs a pool of three pods
// whose servers publish their KV-cache events by connecting to the
// picker's --kv-events-listen address (llm-d's kvEventsConfig.zmqEndpoint
// wiring), each under the topic kv@<pod IP>@<model>. A long prompt sent to
// one pod directly, past the picker, is known to the picker by those
// events alone: a request with that prompt as its prefix, sent through the
// gateway, is routed to that pod and finds its prefix cached, for each of
// the three pods. The picker counts the three connected publishers. A pod
// removed from the pool leaves no blocks in the picker's index, even as
// its server keeps publishing; a server whose connection ends has its
// blocks forgotten and is counted out.
func TestPodsThatConnectToThePickerSteerRouting(t *testing.T) {
	c := sharedCluster(t)
	ns := c.Namespace(t)
	hosts := []string{"127.0.0.140", "127.0.0.141", "127.0.0.142"}
	const listenHost = "127.0.0.143"
	port := framework.FreePortT(t, hosts...)
	listen := net.JoinHostPort(listenHost, strconv.Itoa(framework.FreePortT(t, listenHost)))
	if err := c.Client.Create(t.Context(), framework.MakePool(ns, "pool").Ports(int32(port)).Obj()); err != nil {
		t.Fatal(err)
	}
	var sims []*sim
	for i, h := range hosts {
		events := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://%s","topic":"kv@%s@sim-model"}`, listen, h)
		sims = append(sims, startSim(t, h, port, "--kv-events-config", events))
		c.ReadyPod(t, framework.MakePod(ns, "vllm-"+strconv.Itoa(i)).Obj(), h)
	}
	p := startClusterPicker(t, c, ns, "pool", "--kv-events-listen", listen)
	p.WaitWorkers(t, len(hosts))
	g := startGateway(t, p.Addr())
	waitSubscriptions(t, p, len(hosts)) // the three servers' connections

	r := rand.New(rand.NewPCG(17, 19))
	prompts := make([]string, len(hosts))
	for i, s := range sims {
		prompts[i] = randomPrompt(r, 400) // about 80 blocks of the simulator's 16 tokens
		before := kvBlocks(t, p)
		code, body, err := s.Complete(t.Context(), completion(prompts[i], 1, false))
		if err != nil || code != http.StatusOK {
			t.Fatalf("completion sent to pod %d directly: %d %v %.200s", i, code, err, body)
		}
		eventually(t, 10*time.Second, func() error {
			if n := kvBlocks(t, p); n < before+70 {
				return fmt.Errorf("the picker knows %v blocks, want at least %v", n, before+70)
			}
			return nil
		})
	}
	for i, prompt := range prompts {
		if n, least := cachedTokens(t, g, prompt+" and then a question of its own", ""), 70*16; n < least {
			t.Errorf("a request with pod %d's prompt as prefix, through the picker: %d tokens cached, want at least %d (the pod that served the prompt)", i, n, least)
		}
	}

	// Pod 0 leaves the pool; its server runs on and keeps publishing.
	gone := sims[0]
	v, err := p.Worker(gone.addr)
	if err != nil {
		t.Fatal(err)
	}
	goneBlocks := float64(*v.KVEventBlocks)
	if goneBlocks < 70 {
		t.Fatalf("pod 0 holds %v blocks by the picker's index, want at least 70", goneBlocks)
	}
	total := kvBlocks(t, p)
	if err := c.Client.Delete(t.Context(), framework.MakePod(ns, "vllm-0").Obj(), client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	p.WaitWorkers(t, len(hosts)-1)
	eventually(t, 10*time.Second, func() error {
		if n := kvBlocks(t, p); n > total-goneBlocks {
			return fmt.Errorf("the picker knows %v blocks, want at most %v: pod 0's are forgotten", n, total-goneBlocks)
		}
		return nil
	})
	if code, body, err := gone.Complete(t.Context(), completion(randomPrompt(r, 400), 1, false)); err != nil || code != http.StatusOK {
		t.Fatalf("completion sent to the removed pod: %d %v %.200s", code, err, body)
	}
	eventually(t, 10*time.Second, func() error {
		m, err := p.Metrics()
		if err != nil {
			return err
		}
		if n := m.Sum("inferpick_kv_events_unmatched_batches_total"); n == 0 {
			return fmt.Errorf("%v batches dropped as naming no worker, want the removed pod's", n)
		}
		return nil
	})
	if n := kvBlocks(t, p); n > total-goneBlocks {
		t.Errorf("after the removed pod published again, the picker knows %v blocks, want at most %v", n, total-goneBlocks)
	}
	if n := cachedTokens(t, g, prompts[0]+" asked again", ""); n >= 70*16 {
		t.Errorf("the removed pod's prompt through the picker: %d tokens cached, want it routed to a pod that never served it", n)
	}

	// Pod 1's server stops: its connection ends, and what it published
	// is forgotten.
	sims[1].Stop(t)
	waitSubscriptions(t, p, len(hosts)-1) // pods 0 and 2 are still connected
	eventually(t, 10*time.Second, func() error {
		v, err := p.Worker(sims[1].addr)
		if err != nil {
			return err
		}
		if n := *v.KVEventBlocks; n != 0 {
			return fmt.Errorf("pod 1 holds %d blocks by the picker's index after its server stopped, want 0", n)
		}
		return nil
	})
}

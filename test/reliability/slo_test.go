package reliability

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	inferencev1alpha2 "github.com/inferpick/inferpick/api/v1alpha2"
	"github.com/inferpick/inferpick/picker/extproc"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// sloPromptBytes is the size of the prompts of TestSLORouting:
// about 1,500 tokens, which the fast pods prefill in about 15 ms and the
// slow ones in about 150 ms (at the suite's time scale of 0.1).
const sloPromptBytes = 6000

// sloTTFT is the time to first token the test's requests ask for, in
// milliseconds: between what the fast and the slow pods take for a prompt
// of sloPromptBytes, with a margin of about 4× on the fast side and 2.5×
// on the slow.
const sloTTFT = "60"

// TestSLORouting runs routing by latency objectives end to end: two
// fast and two slow pods (ten times the prefill cost per token) on a real
// API server, simulators behind them and a picker with the slo block (no
// exploration, admission on) behind the gateway stand-in.
//
// Streamed requests without objectives, each with a prompt no pod holds,
// spread over all four pods, and the picker then predicts the time to
// first token of the pods it picks (its /metrics shows the predictions).
// Requests stating a TTFT objective between what the fast and the slow
// pods take are then served by the fast pods, while the same requests
// without it still go to the slow ones too. With every pod busy (a long
// stream held on each), a sheddable request (an InferenceObjective of
// negative priority) whose objective no pod can meet is refused 429, while
// the same request of a non-negative priority, and the same sheddable
// request without an objective, are served. Every load ends at 0.
func TestSLORouting(t *testing.T) {
	c := sharedCluster(t)
	ns := c.Namespace(t)
	fast := []string{"127.0.0.190", "127.0.0.191"}
	slow := []string{"127.0.0.192", "127.0.0.193"}
	hosts := slices.Concat(fast, slow)
	port := framework.FreePortT(t, hosts...)
	// A small KV pool: a held stream's prompt fills more than the 2% under
	// which the admitter finds a pod nearly empty and admits anyway.
	kv := []string{"--num-gpu-blocks", "512"}
	for _, h := range fast {
		startSim(t, h, port, append(kv, "--prefill-us-per-token", "100")...)
	}
	for _, h := range slow {
		startSim(t, h, port, append(kv, "--prefill-us-per-token", "1000")...)
	}
	if err := c.Client.Create(t.Context(), framework.MakePool(ns, "pool").Ports(int32(port)).Obj()); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		name     string
		priority int
	}{{"batch", -1}, {"chat", 1}} {
		obj := &inferencev1alpha2.InferenceObjective{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.name},
			Spec: inferencev1alpha2.InferenceObjectiveSpec{
				Priority: ptr.To(o.priority),
				PoolRef:  inferencev1alpha2.PoolObjectReference{Name: "pool"},
			},
		}
		if err := c.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	for i, h := range hosts {
		c.ReadyPod(t, framework.MakePod(ns, "vllm-"+strconv.Itoa(i)).Obj(), h)
	}
	p := startClusterPicker(t, c, ns, "pool", "--config-text",
		"policy:\n  name: cache-aware\n  slo: {exploreNegative: 0, admission: true}\n")
	p.WaitWorkers(t, len(hosts))
	g := startGateway(t, p.Addr())
	addr := func(h string) string { return net.JoinHostPort(h, strconv.Itoa(port)) }
	isFast := func(a string) bool { return a == addr(fast[0]) || a == addr(fast[1]) }

	r := rand.New(rand.NewPCG(19, 19))
	sent := 0
	// send posts a streamed completion with a prompt no pod holds and
	// header, reads it to its end and returns its status and body, and the
	// gateway's record of it.
	send := func(header http.Header) (int, string, framework.Record) {
		t.Helper()
		body := completion(randomPrompt(r, sloPromptBytes/8)[:sloPromptBytes], 8, true)
		resp, err := g.Post(t.Context(), "/v1/completions", body, header)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		sent++
		return resp.StatusCode, string(out), g.WaitRecords(t, sent)[sent-1]
	}
	// spread sends n requests with header and counts them by the pod that
	// served them; it logs the time from each one's routing to its first
	// byte, by the kind of pod.
	spread := func(what string, n int, header http.Header) map[string]int {
		t.Helper()
		by := map[string]int{}
		ttft := map[bool][]time.Duration{}
		for range n {
			status, body, rec := send(header)
			if status != http.StatusOK || !strings.Contains(body, "[DONE]") {
				t.Fatalf("status %d: %.300s", status, body)
			}
			by[rec.Served]++
			ttft[isFast(rec.Served)] = append(ttft[isFast(rec.Served)], rec.TimeToFirstByte-rec.Routed)
		}
		t.Logf("%s: %v; first bytes after routing: fast pods %s, slow pods %s", what, by, summary(ttft[true]), summary(ttft[false]))
		return by
	}
	onFast := func(by map[string]int) int { return by[addr(fast[0])] + by[addr(fast[1])] }
	objective := http.Header{policy.TTFTObjectiveHeader: {sloTTFT}}

	// Warm-up: requests without objectives teach the picker every pod's
	// speed.
	const warmup = 40
	by := spread("warm-up", warmup, nil)
	for _, h := range hosts {
		if by[addr(h)] == 0 {
			t.Errorf("no warm-up request went to %s: %v", addr(h), by)
		}
	}
	pp, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if n := pp.Sum("inference_objective_request_predicted_ttft_seconds"); n == 0 {
		t.Fatalf("no time to first token predicted after %d streamed responses", warmup)
	}

	// The objective sends the requests to the fast pods; the same requests
	// without it go to the slow pods too.
	// Without the objective, the share of the slow pods is about a half,
	// less when the picker's last scrape still shows a slow pod's request
	// that just ended (about 0.3 seen with the race detector): an eighth
	// of 32 leaves that well clear.
	const each = 32
	with := spread("with "+policy.TTFTObjectiveHeader+": "+sloTTFT, each, objective)
	without := spread("without an objective", each, nil)
	if n := onFast(with); n < each*9/10 {
		t.Errorf("%d of %d requests asking for a TTFT of %s ms went to the fast pods %v, want at least 90%%: %v", n, each, sloTTFT, fast, with)
	}
	if n := each - onFast(without); n < each/8 {
		t.Errorf("%d of %d requests without an objective went to the slow pods %v, want at least an eighth: %v", n, each, slow, without)
	}

	// Admission. The picker knows both objectives once a request naming
	// each no longer counts as naming an unknown one.
	for _, name := range []string{"batch", "chat"} {
		eventually(t, 30*time.Second, func() error {
			before, err := unknownObjectives(p)
			if err != nil {
				return err
			}
			if status, body, _ := send(http.Header{extproc.ObjectiveHeader: {name}}); status != http.StatusOK {
				return framework.Stop(fmt.Errorf("a request of objective %s: status %d: %.300s", name, status, body))
			}
			after, err := unknownObjectives(p)
			if err == nil && after != before {
				err = fmt.Errorf("the picker does not know objective %s yet", name)
			}
			return err
		})
	}
	// Every pod busy: a long stream held on each, in decode, and the
	// picker's last scrape of each shows it running and its KV cache in
	// use.
	ctx, cancel := context.WithCancel(t.Context())
	var held sync.WaitGroup
	defer held.Wait()
	defer cancel()
	for _, h := range hosts {
		body := completion(randomPrompt(r, sloPromptBytes/8)[:sloPromptBytes], 4000, true)
		held.Go(func() {
			resp, err := g.Post(ctx, "/v1/completions", body, http.Header{gateway.SubsetHintHeader: {addr(h)}})
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	eventually(t, 30*time.Second, func() error {
		v, err := p.Workers()
		if err != nil {
			return err
		}
		for _, w := range v.Workers {
			if w.Decode != 1 || w.Running == nil || *w.Running < 1 || w.KVUsage == nil || *w.KVUsage < 0.02 {
				return fmt.Errorf("worker %s: decode %d, running %v, KV cache usage %v; want one held stream decoding, seen by a scrape",
					w.Address, w.Decode, deref(w.Running), deref(w.KVUsage))
			}
		}
		return nil
	})
	impossible := func(name string) http.Header {
		return http.Header{policy.TTFTObjectiveHeader: {"1"}, extproc.ObjectiveHeader: {name}}
	}
	status, body, rec := send(impossible("batch"))
	if status != http.StatusTooManyRequests || !strings.Contains(body, "predicted to meet") || rec.Served != "" {
		t.Errorf("a sheddable request asking for a TTFT of 1 ms with every pod busy: status %d, %.300q, served by %q; want 429 saying no pod is predicted to meet it, served by none",
			status, body, rec.Served)
	}
	if status, body, _ := send(impossible("chat")); status != http.StatusOK {
		t.Errorf("the same request of priority 1: status %d: %.300s; want it served", status, body)
	}
	if status, body, _ := send(http.Header{extproc.ObjectiveHeader: {"batch"}}); status != http.StatusOK {
		t.Errorf("the same sheddable request without an objective: status %d: %.300s; want it served", status, body)
	}
	cancel()
	held.Wait()
	p.WaitIdle(t, 30*time.Second)
	checkReleases(t, p)
}

// unknownObjectives reads how many requests named an objective the picker
// did not know.
func unknownObjectives(p *picker) (float64, error) {
	pp, err := p.Metrics()
	if err != nil {
		return 0, err
	}
	return pp.Sum("inferpick_unknown_objectives_total"), nil
}

// deref is *v, or "none" for nil.
func deref[T any](v *T) any {
	if v == nil {
		return "none"
	}
	return *v
}

// summary gives the count, least, median and greatest of ds.
func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Sorted(slices.Values(ds))
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
	}
	return fmt.Sprintf("%d in %s/%s/%s ms (min/median/max)", len(ds), ms(ds[0]), ms(ds[len(ds)/2]), ms(ds[len(ds)-1]))
}

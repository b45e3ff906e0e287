package reliability

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/framework"
)

// TestPrefillDecodeDisaggregation runs llm-d's prefill/decode split end to
// end: two decode pods and two prefill pods told apart by their
// llm-d.ai/role label on a real API server, simulators playing the decode
// pods' routing sidecar, and a picker with disaggregation on behind the
// gateway stand-in. A long prompt is served by a decode pod after a prefill
// pod the picker named computed it; a short one is prefilled where it is
// decoded; no request is decoded on a prefill pod; a client's own
// x-prefiller-host-port never reaches a pod; and every load returns to 0.
func TestPrefillDecodeDisaggregation(t *testing.T) {
	decoders := []string{"127.0.0.130", "127.0.0.131"}
	prefillers := []string{"127.0.0.132", "127.0.0.133"}
	const outsider = "127.0.0.134" // a server outside the pool
	rp := startRolePool(t, outsider, roleHosts{"decode", decoders}, roleHosts{"prefill", prefillers})
	sims, addr := rp.sims, rp.Addr
	p := startClusterPicker(t, rp.c, rp.ns, "pool", "--config-text", "policy:\n  disaggregation: {minUncachedTokens: 64}\n")
	p.WaitWorkers(t, len(decoders)+len(prefillers))
	g := startGateway(t, p.Addr())

	stats := func() map[string]framework.SimStats {
		t.Helper()
		out := map[string]framework.SimStats{}
		for h, s := range sims {
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			out[h] = st
		}
		return out
	}
	send := func(prompt string, header http.Header) {
		t.Helper()
		g.PostOK(t, "/v1/completions", completion(prompt, 4, false), header)
	}
	// requests counts the requests each simulator took since before.
	requests := func(before, after map[string]framework.SimStats, hs []string) (n int64) {
		for _, h := range hs {
			n += after[h].Requests - before[h].Requests
		}
		return n
	}
	long := strings.Repeat("a prompt long enough to be prefilled on a pod of its own. ", 40) // about 580 tokens
	spoof := http.Header{"X-Prefiller-Host-Port": {addr(outsider)}}

	before := stats()
	send(long, nil)
	send(long+"and another, whose end no pod holds. "+strings.Repeat("more words to prefill. ", 30), spoof)
	after := stats()
	if n := requests(before, after, prefillers); n != 2 {
		t.Errorf("the prefill pods took %d requests for two long prompts, want 2 (one prefill each)", n)
	}
	var remote, transferred int64
	for _, h := range decoders {
		remote += after[h].PrefilledRemotely - before[h].PrefilledRemotely
		transferred += after[h].TransferredTokens - before[h].TransferredTokens
	}
	if remote != 2 || transferred == 0 {
		t.Errorf("the decode pods had %d requests prefilled elsewhere, pulling %d tokens; want 2 and some", remote, transferred)
	}

	before = stats()
	send("a short question", nil)
	send("another short one", spoof)
	after = stats()
	if n := requests(before, after, prefillers); n != 0 {
		t.Errorf("the prefill pods took %d requests for short prompts, want 0", n)
	}
	if n := requests(before, after, decoders); n != 2 {
		t.Errorf("the decode pods took %d requests for two short prompts, want 2", n)
	}
	if n := after[outsider].Requests; n != 0 {
		t.Errorf("the server a client named in x-prefiller-host-port took %d requests, want 0", n)
	}
	for i, r := range g.WaitRecords(t, 4) {
		if !slices.Contains([]string{addr(decoders[0]), addr(decoders[1])}, r.Served) {
			t.Errorf("request %d served by %s, not a decode pod", i, r.Served)
		}
	}

	m, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"llm_d_inference_scheduler_disagg_decision_total", "llm_d_inference_scheduler_pd_decision_total"} {
		got := m.SumBy(name, "decision_type")
		if got["prefill-decode"] != 2 || got["decode-only"] != 2 {
			t.Errorf("%s by decision_type = %v, want 2 prefill-decode and 2 decode-only", name, got)
		}
	}
	p.WaitIdle(t, 30*time.Second)
	checkReleases(t, p)
}

package reliability

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/inferpick/inferpick/test/framework"
)

// TestEncodePrefillDecodeDisaggregation runs llm-d's E/P/D split end to
// end with llm-d v0.8.0's own sample config: decode, prefill and encode
// pods told apart by their llm-d.ai/role label on a real API server,
// simulators playing the decode pods' routing sidecar, and a picker behind
// the gateway stand-in. A chat with an image has the image encoded on the
// encode pod the picker named, then its prompt (past the sample's 16
// uncached tokens) prefilled on the prefill pod, before a decode pod serves
// it; a short text chat calls neither; no request is decoded on an encode pod; a client's own
// x-encoder-hosts-ports never reaches a pod, neither beside the encode pod
// the picker names for a chat with three images nor, with the encode pod
// unready, for a chat with an image the picker names no encoder for; and
// every load returns to 0.
func TestEncodePrefillDecodeDisaggregation(t *testing.T) {
	decoders := []string{"127.0.0.160", "127.0.0.161"}
	prefillers := []string{"127.0.0.162"}
	encoders := []string{"127.0.0.163"}
	const outsider = "127.0.0.164" // a server outside the pool
	rp := startRolePool(t, outsider, roleHosts{"decode", decoders}, roleHosts{"prefill", prefillers}, roleHosts{"encode", encoders})
	c, sims, addr, encodePod := rp.c, rp.sims, rp.Addr, rp.pods[encoders[0]]
	hosts := slices.Concat(decoders, prefillers, encoders, []string{outsider})
	sample := filepath.Join(repoRoot(), "picker", "policy", "fileconfig", "testdata", "llm-d-v0.8.0-sim-epd-epp-config.yaml")
	p := startClusterPicker(t, c, rp.ns, "pool", "--config-file", sample)
	p.WaitWorkers(t, len(hosts)-1)
	g := startGateway(t, p.Addr())

	stats := func(h string) framework.SimStats {
		t.Helper()
		st, err := sims[h].Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	send := func(body string, header http.Header) {
		t.Helper()
		g.PostOK(t, "/v1/chat/completions", []byte(body), header)
	}
	chat := func(content string) string {
		return `{"model":"sim-model","max_tokens":4,"messages":[{"role":"user","content":` + content + `}]}`
	}
	image := func(i int) string {
		return chat(fmt.Sprintf(`[{"type":"text","text":"what is in picture %d?"},{"type":"image_url","image_url":{"url":"http://images/%d.png"}}]`, i, i))
	}
	spoof := http.Header{"X-Encoder-Hosts-Ports": {addr(outsider)}}

	send(image(1), nil)
	send(image(2), spoof)
	encoded, prefilled := int64(0), int64(0)
	for _, h := range decoders {
		encoded += stats(h).EncodedItems
		prefilled += stats(h).PrefilledRemotely
	}
	if encoded != 2 || stats(encoders[0]).Requests != 2 {
		t.Errorf("the decode pods had %d items encoded, the encode pod served %d requests; want 2 and 2", encoded, stats(encoders[0]).Requests)
	}
	if prefilled != 2 || stats(prefillers[0]).Requests != 2 {
		t.Errorf("the decode pods had %d requests prefilled elsewhere, the prefill pod served %d; want 2 and 2", prefilled, stats(prefillers[0]).Requests)
	}
	send(chat(`"hi"`), spoof)
	if e, p := stats(encoders[0]).Requests, stats(prefillers[0]).Requests; e != 2 || p != 2 {
		t.Errorf("after a short text chat the encode and prefill pods served %d and %d requests, want still 2 and 2", e, p)
	}
	if n := stats(outsider).Requests; n != 0 {
		t.Errorf("the server a client named in x-encoder-hosts-ports took %d requests, want 0", n)
	}
	for i, r := range g.WaitRecords(t, 3) {
		if !slices.Contains([]string{addr(decoders[0]), addr(decoders[1])}, r.Served) {
			t.Errorf("request %d served by %s, not a decode pod", i, r.Served)
		}
	}

	m, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	got := m.SumBy("llm_d_inference_scheduler_disagg_decision_total", "decision_type")
	if got["encode-prefill-decode"] != 2 || got["decode-only"] != 1 {
		t.Errorf("llm_d_inference_scheduler_disagg_decision_total by decision_type = %v, want 2 encode-prefill-decode and 1 decode-only", got)
	}
	if got := m.SumBy("inferpick_guard_releases_total", "reason"); got["encoded"] != 2 {
		t.Errorf("guard releases by reason = %v, want 2 encoded", got)
	}

	// The client's header beside the picker's: the sidecar spreads three
	// images over every encoder it is named.
	images := chat(`[{"type":"text","text":"compare them"},` +
		`{"type":"image_url","image_url":{"url":"http://images/a.png"}},` +
		`{"type":"image_url","image_url":{"url":"http://images/b.png"}},` +
		`{"type":"image_url","image_url":{"url":"http://images/c.png"}}]`)
	send(images, spoof)
	if n := stats(encoders[0]).Requests; n != 2+3 {
		t.Errorf("after a chat with three images the encode pod served %d requests, want 5", n)
	}
	if n := stats(outsider).Requests; n != 0 {
		t.Errorf("beside the encode pod, the server a client named in x-encoder-hosts-ports took %d requests, want 0", n)
	}
	// No encode pod live: an image chat names no encoder, and the
	// client's header is removed, not passed on.
	c.SetStatus(t, encodePod, func(pod *corev1.Pod) { framework.SetNotReady(pod, encoders[0]) })
	p.WaitWorkers(t, len(hosts)-2)
	send(image(3), spoof)
	if n := stats(outsider).Requests; n != 0 {
		t.Errorf("with no encode pod ready, the server a client named in x-encoder-hosts-ports took %d requests, want 0", n)
	}
	if n := stats(encoders[0]).Requests; n != 5 {
		t.Errorf("the unready encode pod served %d requests, want still 5", n)
	}
	p.WaitIdle(t, 30*time.Second)
	checkReleases(t, p)
}

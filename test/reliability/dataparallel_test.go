package reliability

import (
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/framework"
)

// TestDataParallelThroughThePrimaryPort runs llm-d's data-parallel profile
// handler end to end: two pods on a real API server, each serving two
// data-parallel ranks on the pool's two target ports (a simulator per
// rank), the first rank's simulator also playing the pod's routing sidecar
// on the primary port, and a picker started with llm-d's
// dp-epp-config.yaml behind the gateway stand-in. Requests that share a
// prompt's prefix all go through one pod's primary port to one rank, a
// client's own x-data-parallel-host-port naming an address that is no rank
// of either pod (which the sidecar would answer 400) is never followed; prompts of prefixes of their own spread over the ranks, the
// second ranks reached through their pods' primary ports too; and at the
// end each rank took exactly the requests the picker picked it for.
func TestDataParallelThroughThePrimaryPort(t *testing.T) {
	c := sharedCluster(t)
	ns := c.Namespace(t)
	hosts := []string{"127.0.0.170", "127.0.0.171"}
	port := framework.ConsecutivePortsT(t, hosts[0], 2)
	for _, h := range hosts[1:] {
		for _, p := range []int{port, port + 1} {
			l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("port %d not free on %s: %v", p, h, err)
			}
			_ = l.Close()
		}
	}
	rankAddr := func(h string, r int) string { return net.JoinHostPort(h, strconv.Itoa(port+r)) }
	ranks := map[string]*sim{} // by rank address
	for i, h := range hosts {
		ranks[rankAddr(h, 0)] = startSim(t, h, port, "--data-parallel-rank-ports", "2")
		ranks[rankAddr(h, 1)] = startSim(t, h, port+1)
		c.ReadyPod(t, framework.MakePod(ns, "dp-"+strconv.Itoa(i)).Obj(), h)
	}
	if err := c.Client.Create(t.Context(), framework.MakePool(ns, "pool").Ports(int32(port), int32(port+1)).Obj()); err != nil {
		t.Fatal(err)
	}
	sample, err := os.ReadFile("../../picker/policy/fileconfig/testdata/llm-d-v0.8.0-dp-epp-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(sample), "primaryPort: 8000", "primaryPort: "+strconv.Itoa(port), 1)
	p := startClusterPicker(t, c, ns, "pool", "--config-text", cfg)
	p.WaitWorkers(t, 2*len(hosts))
	g := startGateway(t, p.Addr())

	send := func(prompt string, header http.Header) {
		t.Helper()
		g.PostOK(t, "/v1/completions", completion(prompt, 4, false), header)
	}
	prefix := strings.Repeat("a system prompt every request of this conversation shares. ", 30)
	const n = 6
	for i := range n {
		var header http.Header
		if i%2 == 1 { // a client naming a third rank, which neither pod has
			header = http.Header{"X-Data-Parallel-Host-Port": {rankAddr(hosts[i/2%2], 2)}}
		}
		send(prefix+"question "+strconv.Itoa(i), header)
	}

	counts := map[string]int64{}
	holder := ""
	for addr, s := range ranks {
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		counts[addr] = st.Requests
		if st.Requests > 0 {
			holder = addr
		}
	}
	for addr, got := range counts {
		want := int64(0)
		if addr == holder {
			want = n
		}
		if got != want {
			t.Errorf("rank %s took %d requests, want %d: all %d share a prefix, which one rank holds (counts %v)", addr, got, want, n, counts)
		}
	}
	host, _, _ := net.SplitHostPort(holder)
	primary := rankAddr(host, 0)
	for i, r := range g.WaitRecords(t, n) {
		if r.Served != primary || len(r.Endpoints) != 1 {
			t.Errorf("request %d sent to %v, served by %s; want the primary port %s of the pod whose rank %s holds the prefix, alone", i, r.Endpoints, r.Served, primary, holder)
		}
	}

	// Sixteen prefixes of their own, each tie broken at random: a second
	// rank is picked for some (all on the first ranks has odds of 2^-16).
	for i := range 16 {
		send(strconv.Itoa(i)+" starts a conversation of its own. "+prefix, nil)
	}
	recs := g.WaitRecords(t, n+16)
	for i, r := range recs[n:] {
		if h, _, _ := net.SplitHostPort(r.Served); r.Served != rankAddr(h, 0) || len(r.Endpoints) != 1 {
			t.Errorf("request %d sent to %v, served by %s; want a pod's primary port alone", n+i, r.Endpoints, r.Served)
		}
	}
	m, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	var second int64
	for i, h := range hosts {
		for r := range 2 {
			st, err := ranks[rankAddr(h, r)].Stats()
			if err != nil {
				t.Fatal(err)
			}
			picked := m.Sum("inference_extension_scheduler_attempts_total", "status", "success", "pod_name", "dp-"+strconv.Itoa(i), "port", strconv.Itoa(port+r))
			if float64(st.Requests) != picked {
				t.Errorf("rank %s took %d requests, and the picker picked it for %v", rankAddr(h, r), st.Requests, picked)
			}
			if r == 1 {
				second += st.Requests
			}
		}
	}
	if second == 0 {
		t.Errorf("no request reached a second rank through its pod's primary port")
	}
	p.WaitIdle(t, 30*time.Second)
	checkReleases(t, p)
}

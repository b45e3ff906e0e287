package extproc

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/policy"
)

// The ranks of two data-parallel pods, each rank on a target port of its
// own, whose sidecars listen on primaryPort.
const (
	rankA0      = "10.0.2.1:8000"
	rankA1      = "10.0.2.1:8001"
	rankB0      = "10.0.2.2:8000"
	rankB1      = "10.0.2.2:8001"
	primaryPort = "9000"
)

// onPrimary is the address of rank's pod on the primary port.
func onPrimary(t *testing.T, rank string) string {
	t.Helper()
	host, _, err := net.SplitHostPort(rank)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(host, primaryPort)
}

// dataParallelEnv serves the four ranks with dataParallel on, two
// fallbacks asked for, and the least-load policy, which spreads requests in
// flight over the ranks.
func dataParallelEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, []string{rankA0, rankA1, rankB0, rankB1}, func(o *Options) {
		o.Fallbacks = 2
		o.DataParallel = &policy.DataParallelConfig{PrimaryPort: 9000}
	})
	pol, err := policy.Build(policy.Config{Name: policy.LeastLoad}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	return e
}

// With dataParallel each request is sent to its pod's primary port alone,
// no fallback listed, naming the rank picked for it in
// x-data-parallel-host-port over the client's; the load is held on that
// rank until its response ends, whatever address the gateway reports as
// served.
func TestDataParallelSendsToThePrimaryPortNamingTheRank(t *testing.T) {
	e := dataParallelEnv(t)
	spoof := []string{policy.DataParallelHeader, rankB1}
	var ranks []string
	var streams []*session
	var served []string
	for range 4 {
		s := e.open()
		body := chatBody("m", "hello")
		s.requestHeaders("/v1/chat/completions", len(body), false, nil, spoof...)
		s.requestBody(body, true)
		r := s.routed(true)
		rank := r.set[policy.DataParallelHeader]
		if r.dest != onPrimary(t, rank) || r.metaDest != r.dest {
			t.Errorf("routed to %q (metadata %q) naming rank %q, want the rank's pod on port %s alone", r.dest, r.metaDest, rank, primaryPort)
		}
		if slices.Contains(r.removed, policy.DataParallelHeader) || !slices.Contains(r.removed, policy.PrefillerHeader) {
			t.Errorf("removed %v: want the rank's header overwritten, not removed, and the prefiller's removed", r.removed)
		}
		if got := e.load(rank); got != [2]int64{1, 0} {
			t.Errorf("rank %s holds load %v while its request is in prefill, want [1 0]", rank, got)
		}
		ranks, streams, served = append(ranks, rank), append(streams, s), append(served, r.dest)
	}
	slices.Sort(ranks)
	if diff := cmp.Diff([]string{rankA0, rankA1, rankB0, rankB1}, ranks); diff != "" {
		t.Errorf("ranks named to the sidecars (-want +got):\n%s", diff)
	}
	for i, s := range streams {
		s.responseHeaders(200, "text/event-stream", false, served[i])
		s.recv()
		s.responseBody(sse("hi"), false)
		s.recv()
		s.responseBody(sseDone, true)
		s.recv()
	}
	for _, rank := range ranks {
		eventually(t, "the rank's load to end", func() bool { return e.load(rank) == [2]int64{} })
	}
	if got := e.released(reasonCompleted, reasonFallback, reasonError); got[reasonCompleted] != 4 || len(got) != 1 {
		t.Errorf("releases %v, want four completed and nothing else", got)
	}
}

// Without dataParallel a client's x-data-parallel-host-port is removed
// from every routed request, as the prefiller's is, and none is set.
func TestAClientsDataParallelHeaderIsRemoved(t *testing.T) {
	e := newEnv(t, []string{rankA0, rankA1})
	s := e.open()
	body := chatBody("m", "hello")
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, policy.DataParallelHeader, rankA1)
	s.requestBody(body, true)
	r := s.routed(true)
	if v, ok := r.set[policy.DataParallelHeader]; ok || !slices.Contains(r.removed, policy.DataParallelHeader) {
		t.Errorf("set %s to %q, removing %v: want it removed", policy.DataParallelHeader, v, r.removed)
	}
	if r.dest != rankA0+","+rankA1 {
		t.Errorf("routed to %q, want the rank ports themselves, primary then fallback", r.dest)
	}
}

// Under disaggregation with dataParallel the decode pod's sidecar is sent
// both the prefill pod and the decode rank, neither header removed.
func TestDataParallelWithAPrefillPod(t *testing.T) {
	e := disaggEnv(t, 100, policy.Config{}, splitPool, func(o *Options) {
		o.DataParallel = &policy.DataParallelConfig{PrimaryPort: 9000}
	})
	_, r := e.sendChat(long, policy.DataParallelHeader, prefill)
	rank := r.set[policy.DataParallelHeader]
	if rank != decodeA && rank != decodeB || r.dest != onPrimary(t, rank) {
		t.Errorf("routed to %q naming rank %q, want a decode pod's primary port and that pod", r.dest, rank)
	}
	if r.set[policy.PrefillerHeader] != prefill {
		t.Errorf("prefill pod named %q, want %s", r.set[policy.PrefillerHeader], prefill)
	}
	if slices.Contains(r.removed, policy.DataParallelHeader) || slices.Contains(r.removed, policy.PrefillerHeader) {
		t.Errorf("removed %v: want both headers set, not removed", r.removed)
	}
}

// Only a POST to /v1/chat/completions, /v1/completions or /v1/responses
// reaches the rank llm-d's sidecar is named; it sends every other request
// to rank 0, on the primary port. So such a request is picked among, and
// holds its load on, the ranks on the primary port, while a chat is
// spread over every rank.
func TestDataParallelRequestsTheSidecarKeepsGoToRankZero(t *testing.T) {
	ranks := []string{"10.0.2.1:9000", "10.0.2.1:9001", "10.0.2.2:9000", "10.0.2.2:9001"}
	e := newEnv(t, ranks, func(o *Options) { o.DataParallel = &policy.DataParallelConfig{PrimaryPort: 9000} })
	pol, err := policy.Build(policy.Config{Name: policy.LeastLoad}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	requests := map[string]string{
		"/v1/embeddings":              `{"model":"m","input":"hello"}`,
		"/openai/v1/chat/completions": chatBody("m", "hello"),
		"/v1/chat/completions/":       chatBody("m", "hello"),
		"/tokenize":                   `{"model":"m","prompt":"hello"}`,
	}
	for path, body := range requests {
		var held []*session
		for range 4 {
			s := e.open()
			s.requestHeaders(path, len(body), false, nil)
			s.requestBody(body, true)
			r := s.routed(true)
			if rank := r.set[policy.DataParallelHeader]; !strings.HasSuffix(rank, ":9000") || r.dest != rank {
				t.Errorf("%s routed to %q naming rank %q, want rank 0 of its pod on port 9000", path, r.dest, rank)
			}
			held = append(held, s)
		}
		for _, rank := range ranks {
			want := [2]int64{2, 0}
			if strings.HasSuffix(rank, ":9001") {
				want = [2]int64{}
			}
			if got := e.load(rank); got != want {
				t.Errorf("with four %s requests in flight rank %s holds %v, want %v", path, rank, got, want)
			}
		}
		for _, s := range held {
			s.cancel()
		}
		for _, rank := range ranks {
			eventually(t, "the rank's load to end", func() bool { return e.load(rank) == [2]int64{} })
		}
	}
	var held []*session
	seen := map[string]bool{}
	for range 4 {
		s := e.open()
		body := chatBody("m", "hello")
		s.requestHeaders("/v1/chat/completions?x=1", len(body), false, nil)
		s.requestBody(body, true)
		seen[s.routed(true).set[policy.DataParallelHeader]] = true
		held = append(held, s)
	}
	if len(seen) != 4 {
		t.Errorf("four chats named ranks %v, want every rank", seen)
	}
	for _, s := range held {
		s.cancel()
	}
}

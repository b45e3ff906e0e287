package extproc

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inferpick/inferpick/picker/attrexpr"
	"github.com/inferpick/inferpick/picker/extproc/extproctest"
	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// benchChunk is the request-body chunk size a gateway sends.
const benchChunk = extproctest.Chunk

// benchTenants is how many system prompts the benchmark's traffic shares.
const benchTenants = 16

// BenchmarkExchange is one whole request through the ext_proc stream over
// loopback TCP: request headers, the body in 16 KB chunks, the routing reply
// and the streamed body back, then the end of the stream. The policy is
// cache-aware on a warm prefix index. The gateway runs in a child process,
// so B/op, allocs/op and cpu-ns/op (this process's CPU per request) are the
// picker's own; ns/op is the latency of one exchange, gateway included.
// MB/s counts body bytes.
func BenchmarkExchange(b *testing.B) {
	for _, size := range []int{1 << 10, 32 << 10, 400 << 10} {
		for _, workers := range []int{8, 100, 1000} {
			b.Run(fmt.Sprintf("body=%dKB/workers=%d", size>>10, workers), func(b *testing.B) {
				benchExchange(b, size, workers)
			})
		}
	}
}

func benchExchange(b *testing.B, size, workers int) {
	reg := benchRegistry(workers)
	pol := benchPolicy(b, reg, 1)
	gw := startGateway(b, benchServe(b, New(reg, pol, Options{Fallbacks: 2})), size)
	// Warm the index, the connection and the server's pooled buffers.
	for range 256 {
		gw.exchange(b)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(benchChatBody(0, 0, size))))
	cpu := cpuTime()
	for b.Loop() {
		gw.exchange(b)
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkExchangeDisaggregated is BenchmarkExchange with prefill/decode
// disaggregation on, over a pool whose first half is labelled decode and
// second half prefill: every request is decoded on one and, its prompt
// being past minUncachedTokens on its decode pod, prefilled on another, so
// each exchange makes two picks and takes two guards.
func BenchmarkExchangeDisaggregated(b *testing.B) {
	for _, size := range []int{1 << 10, 32 << 10} {
		for _, workers := range []int{8, 100} {
			b.Run(fmt.Sprintf("body=%dKB/workers=%d", size>>10, workers), func(b *testing.B) {
				reg := registry.New()
				eps := make([]registry.Endpoint, workers)
				for i := range eps {
					addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 8000)
					role := registry.ParseRole("decode", true)
					if i >= workers/2 {
						role = registry.ParseRole("prefill", true)
					}
					eps[i] = registry.Endpoint{Key: registry.Key{UID: "uid-" + strconv.Itoa(i), Port: 8000}, Name: addr.String(), Address: addr, Role: role}
				}
				reg.Replace(eps)
				reg.MarkSynced()
				pol := benchPolicy(b, reg, 1)
				srv := New(reg, pol, Options{Fallbacks: 2, Disaggregation: &policy.DisaggregationConfig{}})
				gw := startGateway(b, benchServe(b, srv), size)
				for range 256 {
					gw.exchange(b)
				}
				// Each request held two guards, its decode pod's and its
				// prefill pod's, which the end of its stream released.
				released := 0.0
				for _, r := range []string{reasonPrefilled, reasonCompleted, reasonCancelled} {
					released += testutil.ToFloat64(srv.metrics.releases.WithLabelValues(r))
				}
				if released != 2*256 {
					b.Fatalf("256 requests released %v guards, want 512: a decode and a prefill guard each", released)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(benchChatBody(0, 0, size))))
				cpu := cpuTime()
				for b.Loop() {
					gw.exchange(b)
				}
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// benchPolicy is the cache-aware policy over reg of a picker deployed as
// one of replicas: 1 is what cmd/inferpick runs without leader election,
// the chart's single replica.
func benchPolicy(b *testing.B, reg *registry.Registry, replicas int) policy.Policy {
	pol, err := policy.Build(policy.Config{Name: policy.CacheAware, CacheAware: policy.CacheAwareConfig{Replicas: replicas}}, reg)
	if err != nil {
		b.Fatal(err)
	}
	return pol
}

// benchRegistry returns a synced registry of n workers on 10.0.0.0/16.
func benchRegistry(n int) *registry.Registry {
	reg := registry.New()
	eps := make([]registry.Endpoint, n)
	for i := range eps {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 8000)
		eps[i] = registry.Endpoint{Key: registry.Key{UID: "uid-" + strconv.Itoa(i), Port: 8000}, Name: addr.String(), Address: addr}
	}
	reg.Replace(eps)
	reg.MarkSynced()
	return reg
}

// benchServe serves s on a loopback port over the picker's default
// transport (the direct server; grpc-go's with
// INFERPICK_EXTPROC_TEST_TRANSPORT=grpc) and returns its address.
func benchServe(b *testing.B, s *Server) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	serve(b, s, lis)
	return lis.Addr().String()
}

// benchChatBody is a chat request of about size bytes: tenant's system
// prompt (half the body) then a conversation of its own.
func benchChatBody(tenant, conv, size int) []byte {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	half := max(size/2-80, 16)
	body, err := json.Marshal(struct {
		Model    string    `json:"model"`
		Stream   bool      `json:"stream"`
		Messages []message `json:"messages"`
	}{Model: "bench-model", Stream: true, Messages: []message{
		{Role: "system", Content: benchText("tenant "+strconv.Itoa(tenant), half)},
		{Role: "user", Content: benchText("conversation "+strconv.Itoa(conv), half)},
	}})
	if err != nil {
		panic(err)
	}
	return body
}

// benchText is n bytes of deterministic prose seeded by seed.
func benchText(seed string, n int) string {
	words := []string{"route", "the", "prompt", "to", "a", "warm", "cache", "of", "every", "pod", "and", "keep", "load", "even"}
	out := make([]byte, 0, n+16)
	out = append(out, seed...)
	h := uint32(2166136261)
	for _, c := range []byte(seed) {
		h = (h ^ uint32(c)) * 16777619
	}
	for len(out) < n {
		h = h*1664525 + 1013904223
		out = append(out, ' ')
		out = append(out, words[h>>16%uint32(len(words))]...)
	}
	return string(out[:n])
}

// BenchmarkHandle is the whole pick without a transport: the server's
// handler runs on an in-memory stream that hands it the request headers
// and body chunks and swallows its replies. It covers the body parse, the
// cache-aware pick on a warm index, the guard and the reply messages, for
// a picker deployed alone (the default).
func BenchmarkHandle(b *testing.B) {
	for _, size := range []int{1 << 10, 32 << 10, 400 << 10} {
		for _, workers := range []int{8, 100, 1000} {
			b.Run(fmt.Sprintf("body=%dKB/workers=%d", size>>10, workers), func(b *testing.B) {
				benchHandle(b, size, workers, 1, Options{})
			})
		}
	}
}

// BenchmarkHandleReplica is BenchmarkHandle for one of three active-active
// replicas, which send a tenant's first request to its prefix's home rather
// than to the worker holding the fewest blocks: with 16 tenants over 100
// workers two tenants may share a home and, their conversations exceeding
// its capacity, evict each other's on every pick there.
func BenchmarkHandleReplica(b *testing.B) {
	for _, workers := range []int{100, 1000} {
		b.Run(fmt.Sprintf("body=400KB/workers=%d", workers), func(b *testing.B) {
			benchHandle(b, 400<<10, workers, 3, Options{})
		})
	}
}

// BenchmarkHandleKVEvents is BenchmarkHandle with KV events on
// (--kv-events-port): before the pick the policy tells whether its index
// knows the prompt, and only a prompt it does not know is looked up on the
// model servers. The warm index knows every prompt here, and the lookup
// would answer at once that it cannot tell.
func BenchmarkHandleKVEvents(b *testing.B) {
	b.Run("body=32KB/workers=100", func(b *testing.B) {
		benchHandle(b, 32<<10, 100, 1, Options{Locator: nowhere{}})
	})
}

// nowhere is a Locator that cannot tell where any prompt is cached.
type nowhere struct{}

func (nowhere) Locate(context.Context, string, *openai.Request, *policy.Shared) (bool, error) {
	return false, nil
}

// BenchmarkHandleResponse is BenchmarkHandle for a 1 KB chat on 8 workers
// followed by its streamed response, whose last event carries its usage,
// with no attribute to report and with upstream's sample attribute and
// two more over the usage (Options.Attributes).
func BenchmarkHandleResponse(b *testing.B) {
	for _, n := range []int{0, 3} {
		b.Run(fmt.Sprintf("attributes=%d", n), func(b *testing.B) {
			var opts Options
			for _, a := range [][4]string{
				{"envoy.lb", "x-gateway-inference-request-cost", "usage.completion_tokens", "has(usage.completion_tokens)"},
				{"", "prompt", "usage.prompt_tokens", ""},
				{"billing", "weighted", "usage.prompt_tokens + 4.0 * usage.completion_tokens", "usage.total_tokens > 0"},
			}[:n] {
				attr, err := attrexpr.NewAttribute(a[0], a[1], a[2], a[3])
				if err != nil {
					b.Fatal(err)
				}
				opts.Attributes = append(opts.Attributes, attr)
			}
			benchHandle(b, 1<<10, 8, 1, opts, func(st *extproctest.MemStream) {
				st.Respond("text/event-stream", sse("Hello"), sse(" there"), usageEvent, sseDone, "")
			})
		})
	}
}

func benchHandle(b *testing.B, size, workers, replicas int, opts Options, respond ...func(*extproctest.MemStream)) {
	reg := benchRegistry(workers)
	pol := benchPolicy(b, reg, replicas)
	opts.Fallbacks = 2
	s := New(reg, pol, opts)
	streams := make([]*extproctest.MemStream, 64)
	for i := range streams {
		streams[i] = extproctest.NewMemStream(b.Context(), newCodec(), benchChatBody(i%benchTenants, i, size))
		for _, f := range respond {
			f(streams[i])
		}
	}
	run := func(st *extproctest.MemStream) {
		st.Rewind()
		if err := s.Process(st); err != nil {
			b.Fatal(err)
		}
		if st.Replies < 2 {
			b.Fatalf("got %d replies, want the routing reply and the body", st.Replies)
		}
	}
	for i := range 4 * len(streams) {
		run(streams[i%len(streams)])
	}
	b.ReportAllocs()
	b.SetBytes(int64(streams[0].BodyLen()))
	i := 0
	for b.Loop() {
		run(streams[i%len(streams)])
		i++
	}
}

// BenchmarkForgetEndpoint is what a pod leaving the pool (and coming back)
// costs the upstream series at the pool sizes of the controller benchmark:
// its name's count of live workers is looked up, and its scheduler attempts
// deleted once the change has settled without it.
func BenchmarkForgetEndpoint(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			reg := registry.New()
			eps := make([]registry.Endpoint, n)
			for i := range eps {
				eps[i] = registry.Endpoint{Key: registry.Key{UID: strconv.Itoa(i), Port: 8000}, Name: "pod-" + strconv.Itoa(i), Namespace: "ns",
					Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 8000)}
			}
			reg.Replace(eps)
			s := New(reg, &inOrder{}, Options{})
			w := reg.Workers()[n/2]
			for b.Loop() {
				s.endpoints.WorkerRemoved(w)
				s.endpoints.Settled()
				s.endpoints.WorkerAdded(w)
			}
		})
	}
}

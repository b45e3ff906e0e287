// Package registry holds the workers a picker may route to and the load
// guards that count the requests in flight on each of them.
//
// A Worker is one endpoint: a (pod UID, port) pair at an address. Load is
// never adjusted by hand: Admit returns a Guard bound to the worker object,
// and the guard decrements exactly once, whatever path the request takes.
// When a worker leaves the registry the object is detached, so guards still in
// flight release harmlessly and a pod re-created at the same address starts
// from zero as a new object. A pod that is not ready but whose server runs
// on keeps its worker, parked: out of the picks, with its load, its metrics
// and what the policies learned of it, until it is Ready again at the same
// address with the same container restarts. A container that restarted is a
// new server with an empty cache: a new object, which carries the requests
// still in flight on the one it replaced until they end.
package registry

import (
	"math/bits"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/inferpick/inferpick/picker/prefix"
)

// Key identifies an endpoint across its lifetime: the pod's UID and the
// target port. A pod re-created with the same name and address has a new UID
// and so a new Key.
type Key struct {
	UID  string
	Port int32
}

// Endpoint is what the controllers (or --static-endpoints) know of a worker.
type Endpoint struct {
	Key       Key
	Namespace string
	Name      string // pod name; the address for static endpoints
	Address   netip.AddrPort
	// Rank is the port's place in the pool's target ports, 0 for a single
	// port: the data-parallel rank it serves when each of a deployment's
	// ranks has a port of its own, on its first node (its metrics name the
	// rank wherever it runs: Metrics.Engines).
	Rank int
	// Restarts is how many times the containers serving the port have
	// restarted, all together: a restart is a new server process, with an
	// empty cache.
	Restarts int32
	// OwnMetrics is set for an endpoint whose port serves its own metrics
	// page, to be scraped there whatever the scraper's metrics port
	// (--model-server-metrics-port): the endpoints of a pool with several
	// target ports, one data-parallel rank each, as the upstream picker
	// scrapes them. Unset, the metrics port applies (a pool of one target
	// port, a static endpoint). A worker whose endpoint changes in this
	// alone is kept and takes the new value.
	OwnMetrics bool
	// Role is the stages of a request the pod serves (its llm-d.ai/role
	// label). A worker whose endpoint changes in this alone is kept and
	// takes the new value.
	Role Role
	// Context is the prompt lengths the pod is meant for (its
	// context-length label, when the policy reads one). A worker whose
	// endpoint changes in this alone is kept and takes the new value.
	Context ContextRange
	// Labels are the values of the pod labels the policy's label filters
	// read (policy.Config.LabelKeys). A worker whose endpoint changes in
	// this alone is kept and takes the new values.
	Labels Labels
	// Unready is set for a pod that is not ready but not gone: its worker,
	// if it has one, is parked (out of the picks, kept) until the pod is
	// Ready again or gone. It makes no worker for a pod that has none.
	Unready bool
}

// Engines is a set of a server's data-parallel engines by their index, the
// engine label of vLLM's metrics (each engine's data-parallel rank over the
// whole deployment): bit e for engine e. Indexes from 64 on are not kept.
type Engines uint64

// Len returns how many engines the set holds.
func (s Engines) Len() int { return bits.OnesCount64(uint64(s)) }

// Has reports whether the set holds engine e.
func (s Engines) Has(e int) bool { return e >= 0 && e < 64 && s&(1<<e) != 0 }

// List returns the set's engines in ascending order.
func (s Engines) List() []int {
	out := make([]int, 0, s.Len())
	for v := uint64(s); v != 0; v &= v - 1 {
		out = append(out, bits.TrailingZeros64(v))
	}
	return out
}

// Metrics is a snapshot of what a worker's model server reported about
// itself. Zero values mean "not reported".
type Metrics struct {
	Waiting      int     // requests queued in the model server
	Running      int     // requests being processed
	KVUsage      float64 // KV-cache usage in [0,1]
	BlockSize    int     // tokens per KV block
	NumGPUBlocks int     // KV blocks the server holds
	// Served is what models the server answers to; nil until known.
	Served *Served
	// LoRA is the server's LoRA adapter state; nil when not reported.
	LoRA *LoRA
	// Counters are the server's cumulative counters the policies calibrate
	// their cost model from; 0 means not reported.
	Counters Counters
	// Engines are the data-parallel engines the server behind the port
	// fronts, by rank (vLLM's internal, hybrid or external load balancer);
	// empty when its metrics name none.
	Engines Engines
	// Restarts counts the restarts of the model server the scraper has
	// seen behind the endpoint: a cumulative counter that went back, or a
	// LoRA report gone from its page. What was learned of an earlier run,
	// such as the adapters this picker sent there, no longer holds.
	Restarts uint32
	Scraped  time.Time // when the page was fetched; zero: never (see Fresh)
	// Own and OwnPrefill are this picker's requests in flight on the
	// worker (all, and those in prefill) when the page was fetched: the
	// part of Running + Waiting that is its own.
	Own, OwnPrefill int64
}

// Fresh reports whether m was scraped at most staleness before now: the
// figures the policies and the pool's averages may trust.
func (m *Metrics) Fresh(now time.Time, staleness time.Duration) bool {
	return !m.Scraped.IsZero() && now.Sub(m.Scraped) <= staleness
}

// Counters are a model server's cumulative counters (vLLM's names in
// parentheses).
type Counters struct {
	PromptTokens  float64 // prompt tokens scheduled (vllm:prompt_tokens_total)
	PrefixQueries float64 // prompt tokens looked up in the prefix cache (vllm:prefix_cache_queries_total)
	PrefixHits    float64 // of those, tokens found (vllm:prefix_cache_hits_total)
	// TierHits are prompt tokens loaded from an offloading tier (or another
	// store behind the server's KV connector) instead of computed
	// (vllm:external_prefix_cache_hits_total).
	TierHits float64
	// PrefillSeconds over Prefills requests (vllm:request_prefill_time_seconds).
	PrefillSeconds, Prefills float64
	// DecodeSeconds over DecodeTokens output tokens (vllm:inter_token_latency_seconds).
	DecodeSeconds, DecodeTokens float64
}

// Served lists the models a worker serves: the base models (served names)
// and the LoRA adapters with their base model. Both are sorted by name and
// shared between snapshots: never modify them.
type Served struct {
	Bases    []string
	Adapters []Adapter
	// Complete is set when the lists are all the worker serves (read from
	// its /v1/models); model names seen on its metrics alone are not.
	Complete bool
}

// Adapter is a LoRA adapter a worker serves.
type Adapter struct {
	Name   string
	Parent string // its base model; empty when not reported
}

// LoRA is a worker's LoRA adapter state (vllm:lora_requests_info): how many
// distinct adapters a batch may hold and those in use by running or waiting
// requests, sorted.
type LoRA struct {
	Max    int
	Active []string
}

// Worker is one endpoint of the pool. All methods are safe for concurrent use.
type Worker struct {
	ep   Endpoint // its Rank and OwnMetrics are rank's and ownMetrics' first values
	rank atomic.Int64
	// ownMetrics is the endpoint's OwnMetrics as it is now.
	ownMetrics atomic.Bool
	role       atomic.Uint32          // the endpoint's Role as it is now
	context    atomic.Uint64          // the endpoint's Context as it is now, packed
	labels     atomic.Pointer[Labels] // the endpoint's Labels as they are now; nil for none
	addr       string                 // ep.Address formatted once
	id         uint32                 // unique for the life of the process; never reused
	stable     uint64                 // ep.Key hashed once
	podKey     uint64                 // the pod's namespace/name hashed once

	prefill  atomic.Int64
	decode   atomic.Int64
	inFlight atomic.Int64 // prefill + decode, moved first on admission and last on release
	tpot     tpotObjectives
	metrics  atomic.Pointer[Metrics]
	calib    atomic.Pointer[Calibration]
	latency  atomic.Pointer[LatencyFactors]
	removed  atomic.Bool
	// parked is when the worker left the picks, its pod unready; nil
	// while it may be picked.
	parked atomic.Pointer[time.Time]
	// carry is the worker this one replaced at the same address while
	// requests admitted there were in flight. Load and InFlight count them;
	// their guards release into that object. The registry cuts the link
	// once they have ended.
	carry atomic.Pointer[Worker]
}

var nextID atomic.Uint32

func newWorker(ep Endpoint) *Worker {
	w := &Worker{ep: ep, addr: ep.Address.String(), id: nextID.Add(1),
		stable: prefix.StableString(ep.Key.UID) ^ uint64(ep.Key.Port)*0x9e3779b97f4a7c15,
		podKey: prefix.StableString(ep.Namespace + "/" + ep.Name)}
	w.rank.Store(int64(ep.Rank))
	w.ownMetrics.Store(ep.OwnMetrics)
	w.role.Store(uint32(ep.Role))
	w.context.Store(ep.Context.pack())
	w.setLabels(ep.Labels)
	return w
}

// Endpoint returns what the worker was created from, with the rank its
// port has now (a port that moves in the pool's target ports keeps its
// worker and takes the rank of its new place), its OwnMetrics as it is now
// (the pool gained or lost target ports), its Role, Context and Labels as
// they are now and Unready while it is parked.
func (w *Worker) Endpoint() Endpoint {
	ep := w.ep
	ep.Rank = int(w.rank.Load())
	ep.OwnMetrics = w.ownMetrics.Load()
	ep.Role = w.Role()
	ep.Context = w.ContextRange()
	ep.Labels = w.Labels()
	ep.Unready = w.Parked()
	return ep
}

// OwnMetrics reports the endpoint's OwnMetrics as it is now, without
// copying its Endpoint.
func (w *Worker) OwnMetrics() bool { return w.ownMetrics.Load() }

// Role returns the stages of a request the worker's pod serves, as its
// role label says now.
func (w *Worker) Role() Role { return Role(w.role.Load()) }

// ContextRange returns the prompt lengths the worker's pod is meant for,
// as its context-length label says now.
func (w *Worker) ContextRange() ContextRange { return unpackContextRange(w.context.Load()) }

// Labels returns the values of the pod labels the policy's label filters
// read, as the pod carries them now. It allocates nothing.
func (w *Worker) Labels() Labels {
	if l := w.labels.Load(); l != nil {
		return *l
	}
	return Labels{}
}

// setLabels makes l the worker's labels, storing anew only when they
// changed.
func (w *Worker) setLabels(l Labels) {
	if w.Labels() == l {
		return
	}
	w.labels.Store(&l)
}

// sameServer reports whether ep is the endpoint w was created from, but
// for its rank, where its metrics are read, its role, its context range,
// its labels and its readiness: the same server process, at the same address.
func (w *Worker) sameServer(ep Endpoint) bool {
	ep.Rank, ep.OwnMetrics, ep.Role, ep.Context, ep.Labels, ep.Unready = w.ep.Rank, w.ep.OwnMetrics, w.ep.Role, w.ep.Context, w.ep.Labels, w.ep.Unready
	return w.ep == ep
}

// Address returns "ip:port".
func (w *Worker) Address() string { return w.addr }

// Pod returns the namespace and name of the worker's pod (for a static
// endpoint, no namespace and its address), without copying its Endpoint.
func (w *Worker) Pod() (namespace, name string) { return w.ep.Namespace, w.ep.Name }

// ID is a small integer unique to this worker object for the life of the
// process. A re-created pod gets a new ID.
func (w *Worker) ID() uint32 { return w.id }

// StableKey is the worker's Key hashed: the same pod and port give the same
// key in every process (every replica of the picker), unlike ID.
func (w *Worker) StableKey() uint64 { return w.stable }

// PodKey is the pod's namespace/name hashed: the same for every port of the
// pod, and in every process, for the rendezvous hashing of session ids.
func (w *Worker) PodKey() uint64 { return w.podKey }

// Removed reports whether the worker has left the registry, for good.
func (w *Worker) Removed() bool { return w.removed.Load() }

// Parked reports whether the worker is out of the picks while its pod is
// unready. It is still in the registry and may return.
func (w *Worker) Parked() bool { return w.parked.Load() != nil }

// ParkedSince returns when the worker was parked, and false when it is not.
func (w *Worker) ParkedSince() (time.Time, bool) {
	if t := w.parked.Load(); t != nil {
		return *t, true
	}
	return time.Time{}, false
}

// Live reports whether the worker may be picked: neither removed nor
// parked. A pick that holds an older list of workers checks it.
func (w *Worker) Live() bool { return !w.removed.Load() && !w.Parked() }

// Load returns the requests in flight: admitted without a first token
// (prefill) and streaming output (decode).
func (w *Worker) Load() (prefill, decode int64) {
	prefill, decode = w.prefill.Load(), w.decode.Load()
	for c := w.carry.Load(); c != nil; c = c.carry.Load() {
		prefill += c.prefill.Load()
		decode += c.decode.Load()
	}
	return prefill, decode
}

// InFlight is the requests in flight, prefill and decode together.
func (w *Worker) InFlight() int64 { return w.inFlight.Load() + w.carried() }

// carried is the requests in flight on the workers w replaced.
func (w *Worker) carried() int64 {
	n := int64(0)
	for c := w.carry.Load(); c != nil; c = c.carry.Load() {
		n += c.inFlight.Load()
	}
	return n
}

// Metrics returns the last scraped metrics, or nil if none arrived yet.
func (w *Worker) Metrics() *Metrics { return w.metrics.Load() }

// SetMetrics stores a scrape result.
func (w *Worker) SetMetrics(m *Metrics) {
	if old := w.metrics.Swap(m); servedOf(old) != servedOf(m) {
		servedEpoch.Add(1)
	}
}

func servedOf(m *Metrics) *Served {
	if m == nil {
		return nil
	}
	return m.Served
}

// servedEpoch changes whenever a worker's model list changes or a worker
// is removed.
var servedEpoch atomic.Uint64

// ServedEpoch is a number that changes whenever some worker's model list
// (Metrics.Served) changes or some worker is removed: what was derived from
// every worker's list, read after an epoch, holds while the epoch does.
func ServedEpoch() uint64 { return servedEpoch.Load() }

// Admit counts a new request on the worker, in prefill, and returns the
// guard that will uncount it. The caller must arrange for Release to be
// called on every exit path (a defer is the backstop).
func (w *Worker) Admit() *Guard {
	w.inFlight.Add(1)
	w.prefill.Add(1)
	return &Guard{w: w}
}

// AdmitBelow is Admit when fewer than limit requests are in flight on the
// worker, checked and counted in one atomic step: concurrent admissions
// never pass the limit together. It reports false, and counts nothing, when
// the worker is full.
func (w *Worker) AdmitBelow(limit int64) (*Guard, bool) {
	carried := w.carried() // it only falls: the limit is never passed
	for {
		n := w.inFlight.Load()
		if n+carried >= limit {
			return nil, false
		}
		if w.inFlight.CompareAndSwap(n, n+1) {
			w.prefill.Add(1)
			return &Guard{w: w}, true
		}
	}
}

package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/inferpick/inferpick/controllers"
	"github.com/inferpick/inferpick/picker/epmetrics"
	"github.com/inferpick/inferpick/picker/extproc"
	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/health"
	"github.com/inferpick/inferpick/picker/kvindex"
	"github.com/inferpick/inferpick/picker/observe"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/rewrite"
	"github.com/inferpick/inferpick/picker/scrape"
)

// picker is everything on the request path, independent of where the
// endpoints come from.
type picker struct {
	reg     *registry.Registry
	health  *health.Checker
	servers []manager.Runnable
	promReg *prometheus.Registry
	// priorities maps InferenceObjective names to priorities for flow control.
	priorities *flowcontrol.Priorities
	// rewrites holds the InferenceModelRewrite rules of the pool.
	rewrites *rewrite.Table
	// held is each worker's blocks by its KV-cache events, nil without
	// them.
	held observe.HeldBlocks
}

// runRegistry registers collectors in a registry and remembers them, so that
// they can all be taken out again: a Run that returns leaves nothing behind
// that a later Run in the same process would collide with.
type runRegistry struct {
	*prometheus.Registry
	mu  sync.Mutex
	got []prometheus.Collector
}

func (r *runRegistry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, c)
	return nil
}

func (r *runRegistry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *runRegistry) unregisterAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.got {
		r.Unregister(c)
	}
	r.got = nil
}

// Run starts inferpick and blocks until ctx ends and everything has stopped.
func Run(ctx context.Context, o *Options) error {
	log := o.logging.logger()
	ctrl.SetLogger(log)
	ctx = logr.NewContext(ctx, log)
	logWarnings(log, o.Warnings)
	setMemoryLimit(log, "/sys/fs/cgroup")

	tracer, stopTracing, err := startTracing(ctx, o.Tracing)
	if err != nil {
		return err
	}
	defer func() {
		// Flush what is buffered; the run's context is over by now.
		flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stopTracing(flush); err != nil {
			log.Error(err, "Stopping the trace exporter")
		}
	}()

	// The picker's collectors go into controller-runtime's registry, which
	// its metrics server serves, and leave it when Run returns.
	metrics := &runRegistry{Registry: crmetrics.Registry.(*prometheus.Registry)}
	defer metrics.unregisterAll()
	elected := func() bool { return true }
	p, err := buildPicker(o, log, tracer, metrics, func() bool { return elected() })
	if err != nil {
		return err
	}
	if len(o.static) > 0 {
		eps := make([]registry.Endpoint, 0, len(o.static))
		for _, ap := range o.static {
			eps = append(eps, registry.Endpoint{
				Key:     registry.Key{UID: "static/" + ap.String(), Port: int32(ap.Port())},
				Name:    ap.String(),
				Address: ap,
			})
		}
		p.reg.Replace(eps)
		p.reg.MarkSynced()
		log.Info("Routing over static endpoints", "endpoints", len(eps))
		return runStatic(ctx, o, p)
	}
	mgr, leader, err := newManager(o, p)
	if err != nil {
		return err
	}
	if o.selector == nil {
		if err := controllers.CheckCRD(mgr.GetConfig()); err != nil {
			if errors.Is(err, controllers.ErrCRDMissing) {
				log.Error(err, "Cannot serve an InferencePool")
				if rerr := controllers.RecordOnSelf(ctx, mgr.GetClient(), selfPod(), controllers.ReasonCRDMissing, err.Error()); rerr != nil {
					log.Error(rerr, "Recording the Event")
				}
			}
			return err
		}
	}
	if o.LeaderElection && o.HAMode == HAActivePassive {
		elected = leader.Leading
	}
	logServing(log, o)
	return mgr.Start(ctx)
}

func buildPicker(o *Options, log logr.Logger, tracer trace.Tracer, promReg *runRegistry, elected func() bool) (*picker, error) {
	reg := registry.New()
	cfg := o.policyConfig()

	scraper, err := scrape.New(promReg,
		scrape.WithInterval(o.RefreshMetricsInterval),
		scrape.WithModelsInterval(o.RefreshModelsInterval),
		// A loaded model server can be slow to answer: give it up to a second,
		// within the staleness bound the policy applies (its file's, else the
		// flag's). Pollers are per worker, so a slow one delays nobody else.
		scrape.WithTimeout(min(time.Second, cfg.Default().MetricsStaleness.Duration)),
		scrape.WithMetricsPort(uint16(o.ModelServerMetricsPort)),
		scrape.WithPath(o.ModelServerMetricsPath),
		scrape.WithNames(o.ModelServer.names),
		scrape.WithLog(log.WithName("scrape")),
	)
	if err != nil {
		return nil, fmt.Errorf("metrics scraper: %w", err)
	}
	reg.AddListener(scraper)

	matches := epmetrics.NewPrefixMatches(promReg)
	pol, err := policy.Build(cfg, reg, policy.WithMatchObserver(matches.Observe))
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	priorities := flowcontrol.NewPriorities()
	for name, prio := range o.objectives {
		priorities.SetStatic(name, prio)
	}
	rewrites := rewrite.NewTable()
	var queue *flowcontrol.Queue
	var runnables []manager.Runnable
	// deps run until the ext_proc server has drained (see routing).
	deps := []manager.Runnable{scraper}
	sat := cfg.Default()
	saturation := poolSaturation(sat, reg)
	// With or without the queue: without it a saturated pool refuses only
	// negative priorities, so refusals alone would not show it.
	promReg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "inferpick_pool_saturation",
		Help:        "How near the pool's endpoints are to saturation, as the policy judges it: 0 idle, 1 every endpoint saturated (or none).",
		ConstLabels: prometheus.Labels{"inference_pool": poolLabel(o)},
	}, saturation))
	if o.FlowControl.Enabled {
		queue, err = flowcontrol.New(o.FlowControl, flowcontrol.WithRegisterer(promReg, poolLabel(o)),
			flowcontrol.WithSaturation(saturation))
		if err != nil {
			return nil, err
		}
		reg.AddListener(queueNotifier{queue})
		deps = append(deps, replicaRunnable{queue}, &notifyTicker{q: queue, every: o.RefreshMetricsInterval})
	}
	var locator extproc.Locator
	var held observe.HeldBlocks
	if o.KVEventsPort > 0 || o.KVEventsListen != "" {
		kvIndex := kvindex.New(0)
		held = kvIndex.Held
		sub := &kvindex.Subscriber{Index: kvIndex, Port: o.KVEventsPort, Listen: o.KVEventsListen, Topic: o.KVEventsTopic, ReplayPort: o.KVEventsReplayPort, ReplayTimeout: o.KVEventsReplayTimeout, Log: log.WithName("kvevents")}
		reg.AddListener(sub)
		deps = append(deps, replicaRunnable{sub})
		loc := kvindex.NewLocator(kvIndex, reg, o.TokenizeTimeout)
		loc.OffloadWeight = o.KVEventsOffloadWeight
		promReg.MustRegister(kvindex.NewCollector(kvIndex, sub, loc))
		locator = loc
	}
	srv := extproc.New(reg, pol, extproc.Options{
		Fallbacks:            o.Fallbacks,
		MaxBodyBytes:         o.MaxBodyBytes,
		MaxBufferedBodyBytes: o.MaxBufferedBodyBytes,
		Registerer:           promReg,
		Log:                  log.WithName("extproc"),
		Tracer:               tracer,
		IgnoreSubsetHint:     o.DisableSubsetFilter,
		Priorities:           priorities,
		Rewrites:             rewrites,
		Queue:                admitterOf(queue),
		Reserve:              o.FlowControl.Reserve,
		MaxInFlight:          cfg.MaxInFlight,
		Locator:              locator,
		SessionHeader:        sessionHeader(cfg),
		SessionIDs:           sessionIDs(cfg),
		Disaggregation:       cfg.Disaggregation,
		LabelFilter:          cfg.LabelFilter(),
		EncodeLabelFilter:    cfg.EncodeLabelFilter(),
		DataParallel:         cfg.DataParallel,
		Attributes:           o.attributes,
	})
	promReg.MustRegister(observe.NewWorkerCollector(reg))
	var indexSize func() (int, bool)
	if _, ok := pol.IndexStats(); ok {
		promReg.MustRegister(observe.NewIndexCollector(pol))
		indexSize = func() (int, bool) {
			st, ok := pol.IndexStats()
			return st.Blocks, ok
		}
	}
	promReg.MustRegister(epmetrics.NewPoolCollector(poolLabel(o), reg, indexSize, cfg.Default().MetricsStaleness.Duration))
	srv.RecordBuildInfo(buildInfo())

	var extTLS *tls.Config
	if o.SecureServing {
		cfg, watcher, err := serverTLS(o.CertPath)
		if err != nil {
			return nil, err
		}
		if watcher != nil {
			runnables = append(runnables, watcher)
		}
		applyTLSFlags(cfg, o)
		if o.ClientCAPath != "" {
			cas, err := newClientCAs(o.ClientCAPath, 10*time.Second, log.WithName("tls"))
			if err != nil {
				return nil, err
			}
			cas.require(cfg)
			runnables = append(runnables, cas)
		}
		extTLS = cfg
	}
	hc := health.New(func() bool { return reg.Synced() && elected() }, 250*time.Millisecond)
	extSrv := extProcServer(o, srv, extTLS, hc)
	healthSrv := grpc.NewServer()
	hc.Register(healthSrv)

	extProc := &grpcServer{name: "ext_proc", srv: extSrv, addr: hostPort(o.BindAddress, o.GRPCPort), drain: o.DrainTimeout, onDrain: hc.Drain,
		after: reg.FirstSynced()}
	// The health port answers through the drain (NOT_SERVING for readiness,
	// SERVING for liveness), so a probe sees a draining picker, not a
	// closed port.
	deps = append(deps, &grpcServer{name: "health", srv: healthSrv, addr: hostPort(o.BindAddress, o.GRPCHealthPort), drain: time.Second})
	runnables = append(runnables,
		&healthRunnable{hc},
		&routing{server: extProc, deps: deps},
	)
	return &picker{reg: reg, health: hc, servers: runnables, promReg: promReg.Registry, priorities: priorities, rewrites: rewrites, held: held}, nil
}

// The runnables every replica runs, leader or not.
var (
	_ manager.LeaderElectionRunnable = (*grpcServer)(nil)
	_ manager.LeaderElectionRunnable = (*healthRunnable)(nil)
	_ manager.LeaderElectionRunnable = (*clientCAs)(nil)
	_ manager.LeaderElectionRunnable = (*notifyTicker)(nil)
	_ manager.LeaderElectionRunnable = replicaRunnable{}
	_ manager.Runnable               = (*httpServer)(nil)
)

type healthRunnable struct{ c *health.Checker }

func (h *healthRunnable) Start(ctx context.Context) error { return h.c.Start(ctx) }
func (h *healthRunnable) NeedLeaderElection() bool        { return false }

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// runStatic runs the picker's servers without a cluster, metrics in plain
// HTTP, until ctx ends.
func runStatic(ctx context.Context, o *Options, p *picker) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(p.promReg, promhttp.HandlerOpts{}))
	mux.Handle("/debug/workers", observe.WorkersHandler(p.reg, clock.RealClock{}, p.held))
	for path, h := range pprofHandlers(o) {
		mux.Handle(path, h)
	}
	metrics := &httpServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, addr: hostPort(o.BindAddress, o.MetricsPort)}

	// The metrics port serves until every other server has stopped, so a
	// drain can be watched on /metrics and /debug/workers. (In a cluster the
	// manager stops its HTTP servers last, to the same effect.)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	served := make(chan error, 1)
	go func() {
		err := metrics.Start(serveCtx)
		if err != nil {
			stopRun()
		}
		served <- err
	}()
	err := runAll(runCtx, p.servers)
	stopServing()
	return errors.Join(err, <-served)
}

// runAll starts every runnable; the first to fail stops the others. It
// returns once all have returned, with the first error.
func runAll(ctx context.Context, rs []manager.Runnable) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, r := range rs {
		g.Go(func() error { return r.Start(ctx) })
	}
	return g.Wait()
}

// httpServer runs an HTTP server until its context ends.
type httpServer struct {
	srv  *http.Server
	addr string
}

func (h *httpServer) Start(ctx context.Context) error {
	lis, err := net.Listen("tcp", h.addr)
	if err != nil {
		return fmt.Errorf("metrics: listen on %s: %w", h.addr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- h.srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("metrics: shutdown: %w", err)
	}
	return nil
}

// poolLabel names the served pool in metric labels: "static" with
// --static-endpoints.
func poolLabel(o *Options) string {
	if len(o.static) > 0 {
		return "static"
	}
	return o.PoolName
}

// admitterOf keeps a nil queue a nil interface.
func admitterOf(q *flowcontrol.Queue) extproc.Admitter {
	if q == nil {
		return nil
	}
	return q
}

// queueNotifier tells the queue the endpoints changed (one joined, or
// returned from a readiness flap): capacity may have freed.
type queueNotifier struct{ q *flowcontrol.Queue }

var _ registry.Settler = queueNotifier{}

func (n queueNotifier) WorkerAdded(*registry.Worker)   {}
func (n queueNotifier) WorkerRemoved(*registry.Worker) {}
func (n queueNotifier) Settled()                       { n.q.Notify() }

// notifyTicker wakes the queue every scrape interval, so that a scrape that
// shows room dispatches waiting requests.
type notifyTicker struct {
	q     *flowcontrol.Queue
	every time.Duration
}

func (n *notifyTicker) Start(ctx context.Context) error {
	t := time.NewTicker(n.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			n.q.Notify()
		}
	}
}

func (n *notifyTicker) NeedLeaderElection() bool { return false }

// replicaRunnable runs on every replica, leader or not.
type replicaRunnable struct {
	r interface{ Start(context.Context) error }
}

func (r replicaRunnable) Start(ctx context.Context) error { return r.r.Start(ctx) }
func (replicaRunnable) NeedLeaderElection() bool          { return false }

// policyConfig is the policy's configuration with what the flags add: the
// metrics staleness, and that a picker routes alone without leader election
// (the chart turns it on with more than one replica) and in active-passive
// mode, where only the leader is ready.
func (o *Options) policyConfig() policy.Config {
	cfg := o.Policy
	if cfg.MetricsStaleness.Duration == 0 {
		cfg.MetricsStaleness.Duration = o.MetricsStaleness
	}
	if cfg.CacheAware.Replicas == 0 && (!o.LeaderElection || o.HAMode == HAActivePassive) {
		cfg.CacheAware.Replicas = 1
	}
	return cfg
}

// poolSaturation is how near the pool's pods that decode, and that the
// policy's label filters keep, are to saturation, for the gauges read at
// scrape time: a pod labelled only to prefill (or encode), or one the
// filters leave out, is never a request's own pod, and counting it would
// show a pool whose every pod that may take a request is full as partly
// free.
func poolSaturation(cfg policy.Config, reg *registry.Registry) func() float64 {
	keep := cfg.LabelFilter()
	if keep == nil {
		return func() float64 { return cfg.Saturation(reg.Decoders(), time.Now()) }
	}
	return func() float64 {
		var ws []*registry.Worker
		for _, w := range reg.Decoders() {
			if keep(w) {
				ws = append(ws, w)
			}
		}
		return cfg.Saturation(ws, time.Now())
	}
}

// contextLengthLabel is the pod label the policy's contextLength reads as
// the prompt lengths a pod is meant for, "" when it has none.
func contextLengthLabel(cfg policy.Config) string {
	if cl := cfg.Default().ContextLength; cl != nil {
		return cl.Label
	}
	return ""
}

// sessionHeader is the header of the policy's session affinity, "" when off.
func sessionHeader(cfg policy.Config) string {
	if sa := cfg.Default().SessionAffinity; sa != nil {
		return sa.Header
	}
	return ""
}

// sessionIDs reports whether the session header carries session ids.
func sessionIDs(cfg policy.Config) bool {
	sa := cfg.Default().SessionAffinity
	return sa != nil && sa.Key == policy.SessionID
}

package app

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	inferencev1alpha2 "github.com/inferpick/inferpick/api/v1alpha2"
	"github.com/inferpick/inferpick/controllers"
	"github.com/inferpick/inferpick/picker/observe"
)

// newManager builds the controller manager: a cache limited to the pool's
// namespace, the pool controller feeding the registry, the metrics server
// (authenticated unless disabled) and the picker's servers as runnables. It
// returns the lease election the replica takes part in, nil without one.
func newManager(o *Options, p *picker) (manager.Manager, controllers.Leader, error) {
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	metrics := metricsserver.Options{
		BindAddress:   hostPort(o.BindAddress, o.MetricsPort),
		ExtraHandlers: map[string]http.Handler{"/debug/workers": observe.WorkersHandler(p.reg, clock.RealClock{}, p.held)},
	}
	maps.Copy(metrics.ExtraHandlers, pprofHandlers(o))
	// Plain HTTP with token authentication, as the upstream endpoint picker
	// serves it, unless HTTPS is asked for.
	metrics.SecureServing = o.MetricsSecureServing
	if o.MetricsEndpointAuth {
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	mopts, err := ManagerOptions(o)
	if err != nil {
		return nil, nil, err
	}
	mopts.Metrics = metrics
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return nil, nil, fmt.Errorf("create manager: %w", err)
	}
	leader, err := SetupControllers(mgr, o, Sinks{Endpoints: p.reg, Priorities: p.priorities, Rewrites: p.rewrites}, selfPod())
	if err != nil {
		return nil, nil, err
	}
	for _, r := range p.servers {
		if err := mgr.Add(r); err != nil {
			return nil, nil, fmt.Errorf("add runnable: %w", err)
		}
	}
	return mgr, leader, nil
}

// ManagerOptions are the controller-manager options inferpick runs with for
// o, but for the metrics server: the project's scheme, a cache limited to
// what the pool (or the endpoint selector) needs, and the shutdown bound.
// The manager's own leader election stays off in every mode: it ends the
// process when the lease is lost and releases the lease only after the
// drain, so SetupControllers runs the picker's election instead (lease.go).
// The integration suites start their managers from it.
func ManagerOptions(o *Options) (ctrl.Options, error) {
	scheme, err := controllers.NewScheme()
	if err != nil {
		return ctrl.Options{}, err
	}
	cacheOpts := controllers.CacheOptions(o.pool())
	if o.selector != nil {
		cacheOpts = controllers.SelectorCacheOptions(o.selectorOptions())
	}
	return ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		HealthProbeBindAddress:  "0",
		GracefulShutdownTimeout: ptr(o.DrainTimeout + 5*time.Second),
	}, nil
}

// Sinks are what the controllers keep up to date.
type Sinks struct {
	// Endpoints receives the ready endpoints of the pool (or selector).
	Endpoints controllers.EndpointSink
	// Priorities receives the pool's InferenceObjectives.
	Priorities controllers.ObjectiveSink
	// Rewrites receives the pool's InferenceModelRewrites; nil runs no
	// rewrite controller.
	Rewrites controllers.RewriteSink
}

// SetupControllers adds to mgr the controllers that keep sinks equal to the
// ready endpoints of o's pool (or endpoint selector), the pool's
// InferenceObjectives and its InferenceModelRewrites, and the lease election
// with --ha-enable-leader-election. self is the picker's own Pod, nil
// outside one. It returns the election, nil without one: in active-passive
// mode readiness follows it.
func SetupControllers(mgr manager.Manager, o *Options, sinks Sinks, self *corev1.ObjectReference) (controllers.Leader, error) {
	leader, err := setupLeaderElection(mgr, o)
	if err != nil {
		return nil, err
	}
	if o.selector != nil {
		if err := controllers.SetupSelectorWithManager(mgr, o.selectorOptions(), sinks.Endpoints); err != nil {
			return nil, fmt.Errorf("set up the endpoint selector controller: %w", err)
		}
		return leader, nil
	}
	opts := controllers.PoolReconcilerOptions{Pool: o.pool(), Group: o.PoolGroup, Self: self, Leader: leader,
		ContextLengthLabel: contextLengthLabel(o.Policy), FilterLabels: o.Policy.LabelKeys()}
	if err := controllers.SetupWithManager(mgr, opts, sinks.Endpoints); err != nil {
		return nil, fmt.Errorf("set up the pool controller: %w", err)
	}
	// InferenceObjectives name a pool: without one there are none to read.
	err = setupOptional(mgr, "inferenceobjectives", "The InferenceObjective CRD is not installed: every request has priority 0",
		func() error { return controllers.SetupObjectivesWithManager(mgr, opts, sinks.Priorities) })
	if err != nil || sinks.Rewrites == nil {
		return leader, err
	}
	err = setupOptional(mgr, "inferencemodelrewrites", "The InferenceModelRewrite CRD is not installed: requests are routed without model rewrites",
		func() error { return controllers.SetupRewritesWithManager(mgr, opts, sinks.Rewrites) })
	return leader, err
}

// setupLeaderElection adds the lease election to mgr when o asks for one,
// and returns it (nil otherwise). With an endpoint selector there is no pool
// to record Events on, so only active-passive readiness needs the lease.
func setupLeaderElection(mgr manager.Manager, o *Options) (controllers.Leader, error) {
	if !o.LeaderElection || (o.selector != nil && o.HAMode != HAActivePassive) {
		return nil, nil
	}
	lease, err := newLeaseElector(mgr.GetConfig(), o)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(lease); err != nil {
		return nil, fmt.Errorf("add leader election: %w", err)
	}
	return lease, nil
}

// setupOptional runs setup, which sets up the controller of an
// inference.networking.x-k8s.io/v1alpha2 resource, when the API server
// serves the resource, and otherwise logs without. Those CRDs are optional:
// a chart upgrade does not install CRDs that are new, and a cluster may
// hold the InferencePool CRD alone. A controller waiting for a CRD that is
// not there would stop the picker when its cache gave up.
func setupOptional(mgr manager.Manager, resource, without string, setup func() error) error {
	err := controllers.CheckServed(mgr.GetConfig(), inferencev1alpha2.GroupVersion, resource)
	switch {
	case errors.Is(err, controllers.ErrCRDMissing):
		ctrl.Log.Info(without)
		return nil
	case err != nil:
		return err
	}
	if err := setup(); err != nil {
		return fmt.Errorf("set up the %s controller: %w", resource, err)
	}
	return nil
}

// pool is the served InferencePool's key.
func (o *Options) pool() types.NamespacedName {
	return types.NamespacedName{Namespace: o.PoolNamespace, Name: o.PoolName}
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("load cluster configuration: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load --kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

func ptr[T any](v T) *T { return &v }

// selfPod is the picker's own Pod, from the POD_NAME, POD_UID and NAMESPACE
// variables the chart sets with the downward API; nil outside a Pod.
func selfPod() *corev1.ObjectReference {
	name, uid, ns := os.Getenv("POD_NAME"), os.Getenv("POD_UID"), os.Getenv("NAMESPACE")
	if name == "" || ns == "" {
		return nil
	}
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name, UID: types.UID(uid)}
}

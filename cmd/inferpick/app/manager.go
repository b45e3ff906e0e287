package app

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/inferpick/inferpick/controllers"
	"github.com/inferpick/inferpick/picker/observe"
)

// newManager builds the controller manager: a cache limited to the pool's
// namespace, the pool controller feeding the registry, the metrics server
// (authenticated unless disabled) and the picker's servers as runnables.
func newManager(o *Options, p *picker) (manager.Manager, error) {
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	metrics := metricsserver.Options{
		BindAddress:   hostPort(o.BindAddress, o.MetricsPort),
		ExtraHandlers: map[string]http.Handler{"/debug/workers": observe.WorkersHandler(p.reg, time.Now)},
	}
	maps.Copy(metrics.ExtraHandlers, pprofHandlers(o))
	// Plain HTTP with token authentication, as the upstream endpoint picker
	// serves it, unless HTTPS is asked for.
	metrics.SecureServing = o.MetricsSecureServing
	if o.MetricsEndpointAuth {
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	scheme, err := controllers.NewScheme()
	if err != nil {
		return nil, err
	}
	pool := types.NamespacedName{Namespace: o.PoolNamespace, Name: o.PoolName}
	cacheOpts := controllers.CacheOptions(pool)
	if o.selector != nil {
		cacheOpts = controllers.SelectorCacheOptions(o.selectorOptions())
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cacheOpts,
		Metrics:                       metrics,
		HealthProbeBindAddress:        "0",
		LeaderElection:                o.LeaderElection && o.HAMode == HAActivePassive,
		LeaderElectionID:              o.leaderElectionID(),
		LeaderElectionNamespace:       o.PoolNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.LeaderElectionLeaseDuration,
		RenewDeadline:                 &o.LeaderElectionRenewDeadline,
		RetryPeriod:                   &o.LeaderElectionRetryPeriod,
		GracefulShutdownTimeout:       ptr(o.DrainTimeout + 5*time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if o.selector != nil {
		if err := controllers.SetupSelectorWithManager(mgr, o.selectorOptions(), p.reg); err != nil {
			return nil, fmt.Errorf("set up the endpoint selector controller: %w", err)
		}
	} else {
		opts := controllers.PoolReconcilerOptions{Pool: pool, Group: o.PoolGroup, Self: selfPod()}
		if o.LeaderElection && o.HAMode == HAActiveActive {
			lease, err := newLeaseElector(cfg, o)
			if err != nil {
				return nil, err
			}
			if err := mgr.Add(lease); err != nil {
				return nil, fmt.Errorf("add leader election: %w", err)
			}
			opts.Leader = lease
		}
		if err := controllers.SetupWithManager(mgr, opts, p.reg); err != nil {
			return nil, fmt.Errorf("set up the pool controller: %w", err)
		}
		// InferenceObjectives name a pool: without one there are none to read.
		if err := controllers.SetupObjectivesWithManager(mgr, opts, p.priorities); err != nil {
			return nil, fmt.Errorf("set up the objective controller: %w", err)
		}
	}
	for _, r := range p.servers {
		if err := mgr.Add(r); err != nil {
			return nil, fmt.Errorf("add runnable: %w", err)
		}
	}
	return mgr, nil
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

package app

import (
	"fmt"
	"net/http"
	"time"

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
	if o.MetricsEndpointAuth {
		metrics.SecureServing = true
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	scheme, err := controllers.NewScheme()
	if err != nil {
		return nil, err
	}
	pool := types.NamespacedName{Namespace: o.PoolNamespace, Name: o.PoolName}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         controllers.CacheOptions(pool),
		Metrics:                       metrics,
		HealthProbeBindAddress:        "0",
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              "inferpick-" + o.PoolName,
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
	opts := controllers.PoolReconcilerOptions{Pool: pool, Group: o.PoolGroup}
	if err := controllers.SetupWithManager(mgr, opts, p.reg); err != nil {
		return nil, fmt.Errorf("set up the pool controller: %w", err)
	}
	if err := controllers.SetupObjectivesWithManager(mgr, opts, p.priorities); err != nil {
		return nil, fmt.Errorf("set up the objective controller: %w", err)
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

package controller

import (
	"context"
	"flag"
	"sort"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/inferpick/inferpick/cmd/inferpick/app"
	"github.com/inferpick/inferpick/controllers"
	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/rewrite"
)

// startPicker runs a manager wired by the code cmd/inferpick runs, serving
// pool, and returns the registry it fills. The manager stops when the spec
// ends.
func startPicker(pool types.NamespacedName) *registry.Registry {
	GinkgoHelper()
	return startPickerAs(pool, nil)
}

// startPickerAs is startPicker for a picker running as the Pod self.
func startPickerAs(pool types.NamespacedName, self *corev1.ObjectReference) *registry.Registry {
	GinkgoHelper()
	reg, _ := startManager(pool, self)
	return reg
}

// startManager starts a manager for pool the way cmd/inferpick does and
// returns the registry and the objective priorities its controllers fill.
func startManager(pool types.NamespacedName, self *corev1.ObjectReference) (*registry.Registry, *flowcontrol.Priorities) {
	GinkgoHelper()
	sinks := newSinks()
	startApp(sinks, self, poolArgs(pool)...)
	return sinks.Endpoints.(*registry.Registry), sinks.Priorities.(*flowcontrol.Priorities)
}

// poolPerSpec gives every spec of the calling container a namespace of its
// own, prefix-*, and returns the key of the pool "pool" there, set before
// each spec.
func poolPerSpec(prefix string) *types.NamespacedName {
	key := new(types.NamespacedName)
	BeforeEach(func(ctx SpecContext) {
		*key = types.NamespacedName{Namespace: env.Namespace(ctx, prefix), Name: "pool"}
	})
	return key
}

// poolArgs are the command-line arguments that name pool.
func poolArgs(pool types.NamespacedName) []string {
	return []string{"--pool-name", pool.Name, "--pool-namespace", pool.Namespace}
}

// newSinks returns an empty registry and priorities, and a rewrite table.
func newSinks() app.Sinks {
	return app.Sinks{Endpoints: registry.New(), Priorities: flowcontrol.NewPriorities(), Rewrites: rewrite.NewTable()}
}

// startApp runs the manager cmd/inferpick builds from args (app.Parse,
// app.ManagerOptions, app.SetupControllers) with sinks, as the Pod self
// (nil: outside one), until the spec ends or stop is called. It returns the
// lease election args ask for (nil without one).
func startApp(sinks app.Sinks, self *corev1.ObjectReference, args ...string) (leader controllers.Leader, stop func()) {
	GinkgoHelper()
	o, err := app.Parse(flag.NewFlagSet("inferpick", flag.ContinueOnError), args)
	Expect(err).NotTo(HaveOccurred())
	mopts, err := app.ManagerOptions(o)
	Expect(err).NotTo(HaveOccurred())
	mopts.Metrics = metricsserver.Options{BindAddress: "0"}
	// Every spec starts its own manager in this process.
	mopts.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
	mgr, err := ctrl.NewManager(env.Config, mopts)
	Expect(err).NotTo(HaveOccurred())
	leader, err = app.SetupControllers(mgr, o, sinks, self)
	Expect(err).NotTo(HaveOccurred())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	stop = func() {
		cancel()
		Eventually(done).Should(BeClosed())
	}
	DeferCleanup(stop)
	return leader, stop
}

// workers lists the registry as "pod@address" strings, sorted.
func workers(reg *registry.Registry) func() []string {
	return func() []string {
		var out []string
		for _, w := range reg.Workers() {
			out = append(out, w.Endpoint().Name+"@"+w.Address())
		}
		sort.Strings(out)
		return out
	}
}

// workerAt returns the worker at addr, or nil.
func workerAt(reg *registry.Registry, addr string) func() *registry.Worker {
	return func() *registry.Worker {
		for _, w := range reg.Workers() {
			if w.Address() == addr {
				return w
			}
		}
		return nil
	}
}

// poolEvents returns "type reason" of the Events recorded on the pool, once
// per occurrence (repeated Events are one object with a count).
func poolEvents(ctx context.Context, pool types.NamespacedName) func(Gomega) []string {
	return objectEvents(ctx, "InferencePool", pool)
}

// objectEvents lists "Type Reason" of the Events on the object of kind named key.
func objectEvents(ctx context.Context, kind string, key types.NamespacedName) func(Gomega) []string {
	return func(g Gomega) []string {
		var list corev1.EventList
		g.Expect(env.Client.List(ctx, &list, client.InNamespace(key.Namespace))).To(Succeed())
		var out []string
		for i := range list.Items {
			e := &list.Items[i]
			if e.InvolvedObject.Kind != kind || e.InvolvedObject.Name != key.Name {
				continue
			}
			for range max(e.Count, 1) {
				out = append(out, e.Type+" "+e.Reason)
			}
		}
		return out
	}
}

// updateStatus writes pod's status the way a kubelet does, through the
// status subresource.
func updateStatus(ctx context.Context, pod *corev1.Pod, set func(*corev1.Pod)) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		set(pod)
		g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
	}).Should(Succeed())
}

// update changes an object through a read-modify-write that retries on
// conflicts.
func update[T client.Object](ctx context.Context, obj T, change func(T)) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		change(obj)
		g.Expect(env.Client.Update(ctx, obj)).To(Succeed())
	}).Should(Succeed())
}

package controller

import (
	"context"
	"flag"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/inferpick/inferpick/cmd/inferpick/app"
	"github.com/inferpick/inferpick/picker/registry"
	tf "github.com/inferpick/inferpick/test/framework"
)

var _ = Describe("A cluster with the InferencePool CRD alone", func() {
	// The InferenceObjective and InferenceModelRewrite CRDs are optional: a
	// chart upgrade does not install CRDs that are new, and a platform may
	// install the GA InferencePool CRD alone. A controller left waiting for
	// a CRD that is not served stops the manager when its cache gives up
	// (after CacheSyncTimeout), which would restart the picker for good.
	It("routes, and keeps running past the controllers' cache sync timeout", func(ctx SpecContext) {
		cp, err := tf.StartControlPlane(tf.ControlPlaneOptions{CRDPaths: []string{
			filepath.Join(tf.RepoRoot(), "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml")}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cp.Stop)
		Expect(cp.Client.Create(ctx, tf.MakePool("default", "pool").Ports(8000).Obj())).To(Succeed())
		pod := tf.MakePod("default", "vllm-0").Obj()
		Expect(cp.Client.Create(ctx, pod)).To(Succeed())
		tf.SetReady(pod, "127.0.0.1")
		Expect(cp.Client.Status().Update(ctx, pod)).To(Succeed())

		o, err := app.Parse(flag.NewFlagSet("inferpick", flag.ContinueOnError), []string{"--pool-name", "pool", "--pool-namespace", "default"})
		Expect(err).NotTo(HaveOccurred())
		mopts, err := app.ManagerOptions(o)
		Expect(err).NotTo(HaveOccurred())
		mopts.Metrics = metricsserver.Options{BindAddress: "0"}
		const syncTimeout = 2 * time.Second // 2 minutes by default
		mopts.Controller = config.Controller{SkipNameValidation: ptr.To(true), CacheSyncTimeout: syncTimeout}
		mgr, err := ctrl.NewManager(cp.Config, mopts)
		Expect(err).NotTo(HaveOccurred())
		sinks := newSinks()
		_, err = app.SetupControllers(mgr, o, sinks, nil)
		Expect(err).NotTo(HaveOccurred())
		runCtx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(runCtx) }()

		reg := sinks.Endpoints.(*registry.Registry)
		Eventually(workers(reg)).Should(ConsistOf("vllm-0@127.0.0.1:8000"))
		Expect(reg.Synced()).To(BeTrue())
		// Nothing is to happen here: the manager must outlive the time a
		// controller waiting for a missing CRD would have stopped it after.
		Consistently(done, 2*syncTimeout).ShouldNot(Receive())
		cancel()
		Eventually(done).Should(Receive(BeNil()))
	})
})

package framework

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/inferpick/inferpick/test/framework"
)

// Suite registers a control plane for the Ginkgo suite of the calling
// package: started before its first spec, stopped after its last, with
// test/framework's deadlines as the default Eventually timeout. The Env it
// returns is usable from the first spec on.
func Suite() *Env {
	env := new(Env)
	ginkgo.BeforeSuite(func() {
		// Deadlines, not expectations of speed: the machine may be busy.
		gomega.SetDefaultEventuallyTimeout(framework.Timeout)
		gomega.SetDefaultEventuallyPollingInterval(framework.PollInterval)
		gomega.SetDefaultConsistentlyDuration(500 * time.Millisecond)
		ctrl.SetLogger(ginkgo.GinkgoLogr)
		started, err := Start()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		*env = *started
	})
	ginkgo.AfterSuite(func() {
		gomega.Expect(env.Stop()).To(gomega.Succeed())
	})
	return env
}

// Namespace creates a namespace for the running spec, from a BeforeEach or
// an It, deletes it when the spec ends, and returns its name.
func (e *Env) Namespace(ctx context.Context, prefix string) string {
	ginkgo.GinkgoHelper()
	ns, err := e.CreateNamespace(ctx, prefix)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func(ctx ginkgo.SpecContext) { //nolint:contextcheck // the spec's context has ended by then; Ginkgo gives cleanup its own
		gomega.Expect(e.DeleteNamespace(ctx, ns)).To(gomega.Succeed())
	})
	return ns.Name
}

// Run runs the Ginkgo specs of the calling package as t.
func Run(t *testing.T, suite string) {
	t.Helper()
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, suite)
}

// Package controller runs the pool reconciler in a real manager against a
// real API server and checks what reaches the picker's worker registry.
package controller

import (
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"

	testframework "github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/integration/framework"
)

var env *framework.Env

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Pool Controller Suite")
}

var _ = BeforeSuite(func() {
	// Deadlines, not expectations of speed: the machine may be busy.
	SetDefaultEventuallyTimeout(testframework.Timeout)
	SetDefaultEventuallyPollingInterval(testframework.PollInterval)
	SetDefaultConsistentlyDuration(500 * time.Millisecond)
	ctrl.SetLogger(GinkgoLogr)
	var err error
	env, err = framework.Start()
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	Expect(env.Stop()).To(Succeed())
})

// Package crd checks the InferencePool CRD's validation and defaults against
// a real API server, through unstructured objects shaped like the YAML a user
// would apply.
package crd

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	testframework "github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/integration/framework"
)

var env *framework.Env

func TestCRD(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "InferencePool CRD Suite")
}

var _ = BeforeSuite(func() {
	// Deadlines, not expectations of speed: the machine may be busy.
	SetDefaultEventuallyTimeout(testframework.Timeout)
	SetDefaultEventuallyPollingInterval(testframework.PollInterval)
	var err error
	env, err = framework.Start()
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	Expect(env.Stop()).To(Succeed())
})

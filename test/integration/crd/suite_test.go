// Package crd checks the InferencePool CRD's validation and defaults against
// a real API server, through unstructured objects shaped like the YAML a user
// would apply.
package crd

import (
	"testing"

	"github.com/inferpick/inferpick/test/integration/framework"
)

// env is the suite's control plane.
var env = framework.Suite()

func TestCRD(t *testing.T) { framework.Run(t, "InferencePool CRD Suite") }

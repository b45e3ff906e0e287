// Package controller runs the pool reconciler in a real manager against a
// real API server and checks what reaches the picker's worker registry.
package controller

import (
	"testing"

	"github.com/inferpick/inferpick/test/integration/framework"
)

// env is the suite's control plane.
var env = framework.Suite()

func TestController(t *testing.T) { framework.Run(t, "Pool Controller Suite") }

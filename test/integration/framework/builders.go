package framework

import (
	"github.com/inferpick/inferpick/test/framework"
)

// The builders live in test/framework; these names keep the integration
// suites' spelling.

// PoolWrapper builds InferencePools: MakePool("ns", "pool").Ports(8000).Obj().
type PoolWrapper = framework.PoolWrapper

// PodWrapper builds Pods as a scheduler would leave them.
type PodWrapper = framework.PodWrapper

var (
	// MakePool returns a pool selecting app=vllm with no target ports yet.
	MakePool = framework.MakePool
	// MakePod returns a pod labelled app=vllm, bound to node "node-1".
	MakePod = framework.MakePod
	// SetReady gives a pod the status of a running, ready container at ip.
	SetReady = framework.SetReady
	// SetNotReady gives a pod the status of a container failing its
	// readiness probe at ip.
	SetNotReady = framework.SetNotReady
)

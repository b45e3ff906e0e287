package reliability

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/test/framework"
)

// TestARoleLabelEditedOnARunningPodIsFollowed labels pods with llm-d's
// roles and edits one pod's label while it runs: /debug/workers shows the
// role each pod's label says, then the edited pod's new role, and the pool
// still has both workers.
func TestARoleLabelEditedOnARunningPodIsFollowed(t *testing.T) {
	c := sharedCluster(t)
	ns := c.Namespace(t)
	hosts := []string{"127.0.0.48", "127.0.0.49"}
	port := framework.FreePortT(t, hosts...)
	if err := c.Client.Create(t.Context(), framework.MakePool(ns, "pool").Ports(int32(port)).Obj()); err != nil {
		t.Fatal(err)
	}
	decode := c.ReadyPod(t, framework.MakePod(ns, "vllm-0").Label(policy.RoleLabel, "decode").Obj(), hosts[0])
	c.ReadyPod(t, framework.MakePod(ns, "vllm-1").Obj(), hosts[1])
	p := startClusterPicker(t, c, ns, "pool")
	p.WaitWorkers(t, 2)

	addr := func(i int) string { return net.JoinHostPort(hosts[i], strconv.Itoa(port)) }
	roles := func(want0, want1 string) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			for i, want := range []string{want0, want1} {
				w, err := p.Worker(addr(i))
				if err != nil {
					return err
				}
				if w.Role != want {
					return fmt.Errorf("%s shows role %q, want %q", addr(i), w.Role, want)
				}
			}
			return nil
		})
	}
	roles("decode", "")

	patch := client.MergeFrom(decode.DeepCopy())
	decode.Labels[policy.RoleLabel] = "prefill"
	if err := c.Client.Patch(t.Context(), decode, patch); err != nil {
		t.Fatal(err)
	}
	roles("prefill", "")

	patch = client.MergeFrom(decode.DeepCopy())
	delete(decode.Labels, policy.RoleLabel)
	if err := c.Client.Patch(t.Context(), decode, patch); err != nil {
		t.Fatal(err)
	}
	roles("", "")
	p.WaitWorkers(t, 2)
}

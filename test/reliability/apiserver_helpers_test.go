package reliability

import (
	"net"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/test/framework"
)

// cluster is a control plane (etcd and kube-apiserver from
// KUBEBUILDER_ASSETS) with the project's CRDs and a kubeconfig for the
// picker process.
type cluster struct {
	*framework.ControlPlane
	env        *envtest.Environment
	Client     client.Client
	kubeconfig string
}

func newCluster() (*cluster, error) {
	// Stable certificates keep the picker's kubeconfig valid over an API
	// server restart.
	cp, err := framework.StartControlPlane(framework.ControlPlaneOptions{StableCerts: true})
	if err != nil {
		return nil, err
	}
	return &cluster{ControlPlane: cp, env: cp.Env, Client: cp.Client, kubeconfig: cp.Kubeconfig}, nil
}

// clusterOnce starts a control plane on first use.
type clusterOnce struct {
	once sync.Once
	c    *cluster
	err  error
}

// shared is the control plane the cluster tests share; TestMain stops it.
var shared clusterOnce

func (s *clusterOnce) stop() {
	if s.c != nil {
		_ = s.c.Stop()
	}
}

// sharedCluster returns the suite's control plane, starting it on first use.
func sharedCluster(t *testing.T) *cluster {
	t.Helper()
	framework.SkipWithoutAssets(t)
	shared.once.Do(func() { shared.c, shared.err = newCluster() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

// ownCluster starts a control plane for one test (one that stops its API
// server, say).
func ownCluster(t *testing.T) *cluster {
	t.Helper()
	cp := framework.StartControlPlaneT(t, framework.ControlPlaneOptions{StableCerts: true})
	return &cluster{ControlPlane: cp, env: cp.Env, Client: cp.Client, kubeconfig: cp.Kubeconfig}
}

// Namespace creates a namespace for the test.
func (c *cluster) Namespace(t *testing.T) string {
	t.Helper()
	return c.ControlPlane.Namespace(t, "reliability")
}

// ReadyPod creates pod and gives it a ready status at ip.
func (c *cluster) ReadyPod(t *testing.T, pod *corev1.Pod, ip string) *corev1.Pod {
	t.Helper()
	return c.CreateReadyPod(t, pod, ip)
}

// SetStatus changes pod's status as a kubelet would.
func (c *cluster) SetStatus(t *testing.T, pod *corev1.Pod, f func(*corev1.Pod)) {
	t.Helper()
	c.SetPodStatus(t, pod, f)
}

// startClusterPicker runs the picker for pool in ns, metrics in plain HTTP
// unless args turn authentication back on.
func startClusterPicker(t *testing.T, c *cluster, ns, pool string, args ...string) *picker {
	t.Helper()
	return startPicker(t, append([]string{"--kubeconfig", c.kubeconfig, "--pool-name", pool, "--pool-namespace", ns,
		"--metrics-endpoint-auth=false"}, args...)...)
}

// roleHosts are the addresses of a pool's pods of one llm-d.ai/role.
type roleHosts struct {
	role  string
	hosts []string
}

// rolePool is a pool on the shared cluster whose pods llm-d tells apart by
// their llm-d.ai/role label, a simulator on every pod's address and on an
// outsider's, all on one port.
type rolePool struct {
	c    *cluster
	ns   string
	port int
	sims map[string]*sim        // by host
	pods map[string]*corev1.Pod // by host
}

// startRolePool starts a simulator on each host of roles and on outsider
// (a server outside the pool), creates the pool and then a ready pod a
// host, named after its role and its place among that role's hosts.
func startRolePool(t *testing.T, outsider string, roles ...roleHosts) *rolePool {
	t.Helper()
	c := sharedCluster(t)
	rp := &rolePool{c: c, ns: c.Namespace(t), sims: map[string]*sim{}, pods: map[string]*corev1.Pod{}}
	var hosts []string
	for _, r := range roles {
		hosts = append(hosts, r.hosts...)
	}
	hosts = append(hosts, outsider)
	rp.port = framework.FreePortT(t, hosts...)
	for _, h := range hosts {
		rp.sims[h] = startSim(t, h, rp.port)
	}
	if err := c.Client.Create(t.Context(), framework.MakePool(rp.ns, "pool").Ports(int32(rp.port)).Obj()); err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		for i, h := range r.hosts {
			rp.pods[h] = c.ReadyPod(t, framework.MakePod(rp.ns, r.role+"-"+strconv.Itoa(i)).Label(policy.RoleLabel, r.role).Obj(), h)
		}
	}
	return rp
}

// Addr is host's address on the pool's port.
func (rp *rolePool) Addr(host string) string { return net.JoinHostPort(host, strconv.Itoa(rp.port)) }

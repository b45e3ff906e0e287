package controllers

import (
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/inferpick/inferpick/picker/registry"
)

func endpoint(name, uid, addr string) registry.Endpoint {
	ap := netip.MustParseAddrPort(addr)
	return registry.Endpoint{
		Key:       registry.Key{UID: uid, Port: int32(ap.Port())},
		Namespace: "ns",
		Name:      name,
		Address:   ap,
	}
}

func ranked(ep registry.Endpoint, rank int) registry.Endpoint {
	ep.Rank = rank
	return ep
}

func ownMetrics(ep registry.Endpoint) registry.Endpoint {
	ep.OwnMetrics = true
	return ep
}

// podEndpoints gives a pod one endpoint per target port, in the ports'
// order, each ranked by its place there; the endpoints of several ports
// serve their own metrics, on their own ports, whatever the metrics port.
func TestPodEndpointsPerPort(t *testing.T) {
	tests := map[string]struct {
		ports []int32
		pod   corev1.Pod
		want  []registry.Endpoint
	}{
		"one endpoint per target port, ranked by its place": {
			ports: []int32{8002, 8000, 8001},
			pod:   makePod("a").ready().ip("127.0.0.1").obj(),
			want: []registry.Endpoint{
				ownMetrics(endpoint("a", "uid-a", "127.0.0.1:8002")),
				ownMetrics(ranked(endpoint("a", "uid-a", "127.0.0.1:8000"), 1)),
				ownMetrics(ranked(endpoint("a", "uid-a", "127.0.0.1:8001"), 2)),
			},
		},
		"one target port: the metrics port applies": {
			ports: []int32{8000},
			pod:   makePod("a").ready().ip("127.0.0.1").obj(),
			want:  []registry.Endpoint{endpoint("a", "uid-a", "127.0.0.1:8000")},
		},
		"IPv6": {
			ports: []int32{8000},
			pod:   makePod("a").ready().ip("::1").obj(),
			want:  []registry.Endpoint{endpoint("a", "uid-a", "[::1]:8000")},
		},
		"same address, new UID": {
			ports: []int32{8000},
			pod:   makePod("a").uid("second").ready().ip("127.0.0.1").obj(),
			want:  []registry.Endpoint{endpoint("a", "second", "127.0.0.1:8000")},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := podEndpoints(tc.ports, &tc.pod)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("podEndpoints() (-want +got):\n%s", diff)
			}
		})
	}
}

// A pod's active-ports annotation (llm-d's key or the upstream picker's)
// limits its endpoints to the target ports it lists; each keeps the rank of
// its place in the pool's target ports.
func TestPodEndpointsActivePorts(t *testing.T) {
	const gie, llmd = "inference.networking.k8s.io/active-ports", "llm-d.ai/active-ports"
	at := func(port string, rank int) registry.Endpoint {
		return ownMetrics(ranked(endpoint("a", "uid-a", "127.0.0.1:"+port), rank))
	}
	tests := map[string]struct {
		annotations map[string]string
		want        []registry.Endpoint
	}{
		"no annotation: every target port": {
			want: []registry.Endpoint{at("8000", 0), at("8001", 1), at("8002", 2)},
		},
		"a subset": {
			annotations: map[string]string{gie: "8000,8002"},
			want:        []registry.Endpoint{at("8000", 0), at("8002", 2)},
		},
		"a later port alone keeps its rank": {
			annotations: map[string]string{gie: "8001"},
			want:        []registry.Endpoint{at("8001", 1)},
		},
		"a port that is not a target port": {
			annotations: map[string]string{gie: "8001,9000"},
			want:        []registry.Endpoint{at("8001", 1)},
		},
		"entries that are not port numbers": {
			annotations: map[string]string{gie: "x, 8002 ,,-1,0,70000,+8000"},
			want:        []registry.Endpoint{at("8000", 0), at("8002", 2)},
		},
		// Upstream and llm-d read each entry with fmt's %d: the number it
		// starts with.
		"entries read by the number they start with": {
			annotations: map[string]string{gie: "8001abc, 8002 8000"},
			want:        []registry.Endpoint{at("8001", 1), at("8002", 2)},
		},
		"empty: no port": {
			annotations: map[string]string{gie: ""},
		},
		"llm-d's key": {
			annotations: map[string]string{llmd: "8002, 8000"},
			want:        []registry.Endpoint{at("8000", 0), at("8002", 2)},
		},
		"both keys: llm-d's is read": {
			annotations: map[string]string{llmd: "8001", gie: "8000"},
			want:        []registry.Endpoint{at("8001", 1)},
		},
		"both keys, llm-d's empty": {
			annotations: map[string]string{llmd: "", gie: "8000"},
		},
		"other annotations": {
			annotations: map[string]string{"example.com/active-ports": "8000"},
			want:        []registry.Endpoint{at("8000", 0), at("8001", 1), at("8002", 2)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod := makePod("a").ready().ip("127.0.0.1")
			for k, v := range tc.annotations {
				pod.annotate(k, v)
			}
			obj := pod.obj()
			got := podEndpoints([]int32{8000, 8001, 8002}, &obj)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("podEndpoints() (-want +got):\n%s", diff)
			}
		})
	}
}

// podEndpoints gives a pod that runs but is not Ready Unready endpoints,
// which park the worker it had, and none to a pod that is gone; each
// endpoint carries the restarts of the pod's containers.
func TestPodEndpoints(t *testing.T) {
	unready := func(ep registry.Endpoint) registry.Endpoint { ep.Unready = true; return ep }
	restarts := func(ep registry.Endpoint, n int32) registry.Endpoint { ep.Restarts = n; return ep }
	failed := makePod("a").condition(corev1.ConditionFalse).ip("127.0.0.1").obj()
	failed.Status.Phase = corev1.PodFailed
	twoContainers := makePod("a").ready().ip("127.0.0.1").obj()
	twoContainers.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "vllm", RestartCount: 2}, {Name: "proxy", RestartCount: 1}}
	tests := map[string]struct {
		pod  corev1.Pod
		want []registry.Endpoint
	}{
		"ready":          {pod: makePod("a").ready().ip("127.0.0.1").obj(), want: []registry.Endpoint{endpoint("a", "uid-a", "127.0.0.1:8000")}},
		"not ready":      {pod: makePod("a").condition(corev1.ConditionFalse).ip("127.0.0.1").obj(), want: []registry.Endpoint{unready(endpoint("a", "uid-a", "127.0.0.1:8000"))}},
		"no condition":   {pod: makePod("a").ip("127.0.0.1").obj(), want: []registry.Endpoint{unready(endpoint("a", "uid-a", "127.0.0.1:8000"))}},
		"restarted":      {pod: makePod("a").ready().ip("127.0.0.1").restarts(3).obj(), want: []registry.Endpoint{restarts(endpoint("a", "uid-a", "127.0.0.1:8000"), 3)}},
		"two containers": {pod: twoContainers, want: []registry.Endpoint{restarts(endpoint("a", "uid-a", "127.0.0.1:8000"), 3)}},
		"failed":         {pod: failed},
		"no IP":          {pod: makePod("a").condition(corev1.ConditionFalse).obj()},
		"terminating":    {pod: makePod("a").condition(corev1.ConditionFalse).ip("127.0.0.1").terminating().obj()},
		"unparsable IP":  {pod: makePod("a").ready().ip("not-an-ip").obj()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := podEndpoints([]int32{8000}, &tc.pod)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("podEndpoints() (-want +got):\n%s", diff)
			}
		})
	}
}

// Each endpoint carries the restarts of the containers that serve its port,
// those that declare it: a sidecar's restart (a mesh proxy, a logging
// agent) leaves the model server's cache, and its worker, as they were.
// A port no container declares may be served by any of them, so every
// container's restart counts; a native sidecar that declares it may be a
// proxy in front of the server, so its restarts count with all of theirs.
func TestPodEndpointsCountTheRestartsOfTheServingContainers(t *testing.T) {
	tests := map[string]struct {
		pod  *podWrapper
		want map[int32]int32 // restarts by port
	}{
		"a sidecar restarted": {
			pod:  makePod("a").container("vllm", 8000, 8001).container("istio-proxy", 15090).restarted("istio-proxy", 3),
			want: map[int32]int32{8000: 0, 8001: 0},
		},
		"the server restarted": {
			pod:  makePod("a").container("vllm", 8000, 8001).container("istio-proxy", 15090).restarted("vllm", 2).restarted("istio-proxy", 3),
			want: map[int32]int32{8000: 2, 8001: 2},
		},
		"a server per port": {
			pod:  makePod("a").container("rank-0", 8000).container("rank-1", 8001).restarted("rank-1", 1),
			want: map[int32]int32{8000: 0, 8001: 1},
		},
		"a port no container declares": {
			pod:  makePod("a").container("vllm", 8000).container("logger").restarted("logger", 1),
			want: map[int32]int32{8000: 0, 8001: 1},
		},
		"no declared ports: any restart counts": {
			pod:  makePod("a").container("vllm").container("logger").restarted("vllm", 2).restarted("logger", 1),
			want: map[int32]int32{8000: 3, 8001: 3},
		},
		"a native sidecar restarted": {
			pod:  makePod("a").sidecar("istio-proxy", 15090).container("vllm", 8000, 8001).restarted("istio-proxy", 4),
			want: map[int32]int32{8000: 0, 8001: 0},
		},
		"a native sidecar without ports restarted": {
			pod:  makePod("a").sidecar("istio-proxy").container("vllm").restarted("istio-proxy", 4),
			want: map[int32]int32{8000: 0, 8001: 0},
		},
		"a native sidecar in front of the server": {
			pod:  makePod("a").sidecar("routing-proxy", 8000).container("vllm", 8200).restarted("routing-proxy", 1).restarted("vllm", 2),
			want: map[int32]int32{8000: 3, 8001: 2},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod := tc.pod.ready().ip("127.0.0.1").obj()
			got := map[int32]int32{}
			for _, ep := range podEndpoints([]int32{8000, 8001}, &pod) {
				got[ep.Key.Port] = ep.Restarts
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("restarts by port (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSelectorOf(t *testing.T) {
	tests := map[string]struct {
		labels  map[string]string
		want    string
		wantErr bool
	}{
		"one label":        {labels: map[string]string{"app": "vllm"}, want: "app=vllm"},
		"prefixed keys":    {labels: map[string]string{"example.com/role": "decode", "app": "vllm"}, want: "app=vllm,example.com/role=decode"},
		"empty value":      {labels: map[string]string{"app": ""}, want: "app="},
		"invalid key":      {labels: map[string]string{"bad key!": "x"}, wantErr: true},
		"invalid prefix":   {labels: map[string]string{"Bad_Prefix/app": "x"}, wantErr: true},
		"no labels at all": {labels: map[string]string{}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sel, err := selectorOf(makePool("pool", 8000).selector(tc.labels).obj())
			if tc.wantErr {
				if err == nil {
					t.Fatalf("selectorOf() = %q, want an error", sel)
				}
				return
			}
			if err != nil {
				t.Fatalf("selectorOf() error: %v", err)
			}
			if diff := cmp.Diff(tc.want, sel.String()); diff != "" {
				t.Errorf("selectorOf() (-want +got):\n%s", diff)
			}
		})
	}
}

// activePorts never fails on an annotation a user writes: every port it
// returns is a port number one of the list's entries starts with.
func FuzzActivePorts(f *testing.F) {
	leadingNumber := regexp.MustCompile(`^[+-]?\d+`)
	for _, s := range []string{"", "8000", "8000,8002", " 8001 , x,,-1,0,70000", "+8000,08001", "8000abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		pod := makePod("a").annotate("inference.networking.k8s.io/active-ports", list).obj()
		ports, ok := activePorts(&pod)
		if !ok {
			t.Fatal("activePorts() reports no annotation on a pod that has one")
		}
		entries := strings.Split(list, ",")
		for _, n := range ports {
			if n < 1 || n > 65535 {
				t.Fatalf("activePorts(%q) returned %d, not a port number", list, n)
			}
			if !slices.ContainsFunc(entries, func(e string) bool {
				v, err := strconv.Atoi(leadingNumber.FindString(strings.TrimSpace(e)))
				return err == nil && v == int(n)
			}) {
				t.Fatalf("activePorts(%q) returned %d, which no entry starts with", list, n)
			}
		}
	})
}

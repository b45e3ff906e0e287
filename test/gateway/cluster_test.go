package gateway

import (
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// okUpstream is a model server stand-in that answers every request 200.
func okUpstream(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// startCluster runs a gateway over the picker addresses, with no message
// timer (as Envoy in FULL_DUPLEX_STREAMED mode), so that a slow machine does
// not fail requests.
func startCluster(t *testing.T, addrs []string, opts ...Option) (*Gateway, string) {
	t.Helper()
	g, err := NewCluster(addrs, append([]Option{WithMessageTimeout(0)}, opts...)...)
	return g, serve(t, g, err)
}

func post(t *testing.T, url string) int {
	t.Helper()
	resp, _ := do(t, newRequest(t, http.MethodPost, url+"/v1/completions", `{"model":"m"}`))
	return resp.StatusCode
}

func TestClusterSpreadsStreamsPerRequest(t *testing.T) {
	up := okUpstream(t)
	addrs := []string{
		newFakePicker(t, &fakePicker{endpoints: up}),
		newFakePicker(t, &fakePicker{endpoints: up}),
		newFakePicker(t, &fakePicker{endpoints: up}),
	}
	g, url := startCluster(t, addrs)
	for i := range 30 {
		if code := post(t, url); code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, code)
		}
	}
	want := map[string]int64{addrs[0]: 10, addrs[1]: 10, addrs[2]: 10}
	if diff := cmp.Diff(want, g.PickerStreams()); diff != "" {
		t.Errorf("streams per picker (-want +got):\n%s", diff)
	}
}

func TestClusterEjectsADeadPickerAndRetriesElsewhere(t *testing.T) {
	up := okUpstream(t)
	dead := deadAddr(t)
	addrs := []string{newFakePicker(t, &fakePicker{endpoints: up}), dead, newFakePicker(t, &fakePicker{endpoints: up})}
	g, url := startCluster(t, addrs, WithPickerCluster(PickerCluster{Consecutive: 2, Ejection: time.Hour, Retry: true}))
	for i := range 30 {
		if code := post(t, url); code != http.StatusOK {
			t.Fatalf("request %d: status %d, want every request served by a live picker", i, code)
		}
	}
	streams := g.PickerStreams()
	if streams[dead] != 0 || streams[addrs[0]]+streams[addrs[2]] != 30 {
		t.Errorf("streams per picker %v, want all 30 on the live ones", streams)
	}
	if c := g.Counters(); c.PickerEjections != 1 || c.ProcessingErrors != 0 {
		t.Errorf("counters %+v, want the dead picker ejected once and no processing error", c)
	}
}

func TestClusterWithNoLivePickerTakesTheFailureMode(t *testing.T) {
	for name, tc := range map[string]struct {
		mode FailureMode
		want int
	}{
		"fail close": {mode: FailClose, want: http.StatusInternalServerError},
		"fail open":  {mode: FailOpen, want: http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			g, url := startCluster(t, []string{deadAddr(t), deadAddr(t)},
				WithFailureMode(tc.mode), WithDefaultUpstream(okUpstream(t)))
			for i := range 4 {
				if code := post(t, url); code != tc.want {
					t.Fatalf("request %d: status %d, want %d", i, code, tc.want)
				}
			}
			if c := g.Counters(); c.StreamsOpened != 0 || c.ProcessingErrors != 4 {
				t.Errorf("counters %+v, want no stream and 4 processing errors", c)
			}
		})
	}
}

func TestClusterWithoutRetryFailsTheRequestsOfADeadPicker(t *testing.T) {
	up := okUpstream(t)
	addrs := []string{newFakePicker(t, &fakePicker{endpoints: up}), deadAddr(t)}
	g, url := startCluster(t, addrs, WithPickerCluster(PickerCluster{Consecutive: 3, Ejection: time.Hour}))
	codes := map[int]int{}
	for range 10 {
		codes[post(t, url)]++
	}
	// Round robin: the dead picker gets every other request until its third
	// failure ejects it.
	if diff := cmp.Diff(map[int]int{http.StatusOK: 7, http.StatusInternalServerError: 3}, codes); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if c := g.Counters(); c.PickerEjections != 1 {
		t.Errorf("counters %+v, want one ejection", c)
	}
}

// healthService serves the gRPC health protocol on a port of its own, as a
// picker replica's health port does; set changes what it answers.
func healthService(t *testing.T, serving bool) (addr string, set func(serving bool)) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	set = func(serving bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if serving {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus("readiness", st)
	}
	set(serving)
	return lis.Addr().String(), set
}

// waitHealthy waits until the gateway's last checks say want.
func waitHealthy(t *testing.T, g *Gateway, want map[string]bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !maps.Equal(g.PickersHealthy(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("picker health %v, want %v", g.PickersHealthy(), want)
		}
		time.Sleep(5 * time.Millisecond) // polling the checker's state, not waiting for an outcome
	}
}

func TestClusterSendsNoStreamToAnUnreadyPicker(t *testing.T) {
	up := okUpstream(t)
	addrs := []string{newFakePicker(t, &fakePicker{endpoints: up}), newFakePicker(t, &fakePicker{endpoints: up})}
	hA, setA := healthService(t, false)
	hB, setB := healthService(t, true)
	g, url := startCluster(t, addrs, WithPickerCluster(PickerCluster{Consecutive: 5, Ejection: time.Hour, Retry: true,
		HealthCheck: &HealthCheck{Addrs: []string{hA, hB}, Service: "readiness", Interval: 10 * time.Millisecond}}))

	// Each phase sets the pickers' readiness, waits for the checks to see
	// it, sends requests and compares the streams each picker took in all.
	for _, ph := range []struct {
		name     string
		a, b     bool
		requests int
		streams  [2]int64
	}{
		{"only the second ready", false, true, 10, [2]int64{0, 10}},
		{"both ready", true, true, 10, [2]int64{5, 15}},
		{"none ready: every picker is used rather than none", false, false, 4, [2]int64{7, 17}},
	} {
		setA(ph.a)
		setB(ph.b)
		waitHealthy(t, g, map[string]bool{addrs[0]: ph.a, addrs[1]: ph.b})
		for i := range ph.requests {
			if code := post(t, url); code != http.StatusOK {
				t.Fatalf("%s: request %d: status %d", ph.name, i, code)
			}
		}
		want := map[string]int64{addrs[0]: ph.streams[0], addrs[1]: ph.streams[1]}
		if diff := cmp.Diff(want, g.PickerStreams()); diff != "" {
			t.Errorf("%s: streams (-want +got):\n%s", ph.name, diff)
		}
	}
}

func TestClusterHealthCheckNeedsAnAddressPerPickerAndAValidTimeout(t *testing.T) {
	for name, tc := range map[string]struct {
		hc   HealthCheck
		want string
	}{
		"an address missing": {HealthCheck{Addrs: []string{"127.0.0.1:3"}, Service: "readiness", Interval: time.Second},
			"1 addresses for 2 pickers"},
		"a negative timeout": {HealthCheck{Addrs: []string{"127.0.0.1:3", "127.0.0.1:4"}, Service: "readiness",
			Interval: time.Second, Timeout: -time.Second}, "timeout -1s"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewCluster([]string{"127.0.0.1:1", "127.0.0.1:2"}, WithPickerCluster(PickerCluster{HealthCheck: &tc.hc}))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to name %q", err, tc.want)
			}
		})
	}
}

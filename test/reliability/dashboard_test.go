package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/yaml"

	"github.com/inferpick/inferpick/test/framework"
)

// metricName matches the series names inferpick exports, as they appear in
// PromQL.
var metricName = regexp.MustCompile(`\b(?:inferpick|inference_objective|inference_pool|inference_extension)_[a-z0-9_]+`)

// monitoringMetrics returns every series name the chart's dashboard and
// alert rules query, with histogram suffixes removed.
func monitoringMetrics(t *testing.T) []string {
	t.Helper()
	var exprs []string
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "charts", "inferpick", "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	raw, err = os.ReadFile(filepath.Join(repoRoot(), "charts", "inferpick", "files", "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(raw, &rules); err != nil {
		t.Fatalf("alert rules: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	set := map[string]bool{}
	for _, e := range exprs {
		for _, m := range metricName.FindAllString(e, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				m = strings.TrimSuffix(m, suffix)
			}
			set[m] = true
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TestDashboardAndAlertsQueryExportedSeries runs a picker with traffic of
// every kind the dashboard shows (streamed with usage, rejected, a model
// server reporting its queue, a peer breaking the protocol) and checks that
// every series the dashboard and the alert rules query is on /metrics.
func TestDashboardAndAlertsQueryExportedSeries(t *testing.T) {
	names := monitoringMetrics(t)
	if len(names) < 20 {
		t.Fatalf("found only %d series in the dashboard and rules: %v", len(names), names)
	}
	s1, s2 := startSim(t, "127.0.0.70", 0), startSim(t, "127.0.0.71", 0)
	// The KV-event series are exported once the picker follows the pods'
	// events, whether or not a pod publishes.
	kvPort := framework.FreePortT(t, "127.0.0.70", "127.0.0.71")
	p := startPicker(t, "--static-endpoints", s1.addr+","+s2.addr,
		"--kv-events-port", strconv.Itoa(kvPort), "--kv-events-replay-port", strconv.Itoa(kvPort))
	p.WaitWorkers(t, 2)
	g := startGateway(t, p.Addr())

	streamed := []byte(`{"model":"sim-model","prompt":"a shared prompt","max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`)
	resp, err := g.Post(t.Context(), "/v1/completions", streamed, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("streamed request: %s", resp.Status)
	}
	if code, _, err := g.Complete(t.Context(), []byte(`{"prompt":"no model"}`)); err != nil || code != http.StatusBadRequest {
		t.Fatalf("bad request: %d %v", code, err)
	}
	breakProtocol(t, p.Addr())

	var missing []string
	eventually(t, 30*time.Second, func() error {
		pp, err := p.Metrics()
		if err != nil {
			return err
		}
		exported := map[string]bool{}
		for _, s := range pp {
			n := s.Name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				n = strings.TrimSuffix(n, suffix)
			}
			exported[n] = true
		}
		missing = missing[:0]
		for _, n := range names {
			if !exported[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not exported: %v", missing)
		}
		return nil
	})
	t.Logf("all %d series the dashboard and alerts query are exported", len(names))
}

// breakProtocol opens an ext_proc stream and sends a response body first.
func breakProtocol(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err == nil {
		t.Fatal("a response body first was answered, want the stream ended")
	}
}

package reliability

import (
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/inferpick/inferpick/test/framework"
)

// TestSessionStaysOnItsPod runs three simulators behind a picker with
// session affinity: the first request of a session gets a token naming the
// pod that served it (the base64 of its namespace/name, a static
// endpoint's being "/ip:port"), and the session's next requests, echoing
// it, all land on that pod and get no new token.
func TestSessionStaysOnItsPod(t *testing.T) {
	hosts := []string{"127.0.0.94", "127.0.0.95", "127.0.0.96"}
	port := framework.FreePortT(t, hosts...)
	var addrs []string
	for _, h := range hosts {
		addrs = append(addrs, startSim(t, h, port).addr)
	}
	p := startPicker(t, "--static-endpoints", strings.Join(addrs, ","),
		"--config-text", "policy:\n  name: least-load\n  sessionAffinity: {header: x-session-token}\n")
	g := startGateway(t, p.Addr())

	send := func(token string) (int, string) {
		t.Helper()
		var h http.Header
		if token != "" {
			h = http.Header{"X-Session-Token": {token}}
		}
		resp, err := g.Post(t.Context(), "/v1/completions", completion("a turn of the session", 4, false), h)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get("X-Session-Token")
	}
	status, token := send("")
	if status != 200 || token == "" {
		t.Fatalf("first request: status %d, token %q; want 200 and a token", status, token)
	}
	first := g.WaitRecords(t, 1)[0].Served
	if want := base64.StdEncoding.EncodeToString([]byte("/" + first)); token != want {
		t.Fatalf("token %q, want %q naming the pod that served, %s", token, want, first)
	}
	const turns = 8
	for i := range turns {
		if status, again := send(token); status != 200 || again != "" {
			t.Fatalf("turn %d: status %d, token %q; want 200 and no new token", i, status, again)
		}
	}
	for i, r := range g.WaitRecords(t, 1+turns)[1:] {
		if r.Served != first {
			t.Errorf("turn %d served by %s, want the session's pod %s", i, r.Served, first)
		}
	}
}

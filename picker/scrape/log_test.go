package scrape

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
	"github.com/inferpick/inferpick/test/framework"
)

// TestScraperLogsAFailingWorkerOnceAndItsRecoveryOnce: a server with no
// metrics page (a vLLM gRPC server) gets one line when its scrapes start
// failing, naming the reason and the page, none for each failure after,
// and one when a scrape works again.
func TestScraperLogsAFailingWorkerOnceAndItsRecoveryOnce(t *testing.T) {
	var scrapes atomic.Int64
	counted := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				scrapes.Add(1)
			}
			h(w, r)
		}
	}
	srv := newModelServer(t, counted(http.NotFound))
	reg := registry.New()
	w := registrytest.Upsert(reg, endpoint("a", srv.addr()))
	var logs framework.LogLines
	startScraper(t, reg, WithLog(logs.Logger()))

	// The third request is sent once the first two have failed.
	eventually(t, "three scrapes of a page that is not there", func() bool { return scrapes.Load() >= 3 })
	srv.set(counted(serve(pageWith(1, 2, 0.5))))
	eventually(t, "metrics on the worker", func() bool { return w.Metrics() != nil })
	after := scrapes.Load()
	eventually(t, "three more scrapes", func() bool { return scrapes.Load() >= after+3 })

	lines := strings.Split(logs.String(), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %d lines, want 2 (failing, working again):\n%s", len(lines), logs.String())
	}
	page := `"address"="http://` + srv.addr().String() + `/metrics"`
	for i, want := range [][]string{
		{`"msg"="Scraping a worker's metrics fails"`, `"worker"="` + srv.addr().String() + `"`, page, `"reason"="status"`, "404"},
		{`"msg"="Scraping a worker's metrics works again"`, `"worker"="` + srv.addr().String() + `"`, page, `"failures"=`},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q does not say %s", i+1, lines[i], w)
			}
		}
	}
	if strings.Contains(lines[1], `"failures"=1 `) {
		t.Errorf("line 2 %q counts one failure, want the run of them", lines[1])
	}
}

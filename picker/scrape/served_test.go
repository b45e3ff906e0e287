package scrape

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

const modelsBody = `{"object":"list","data":[
{"id":"llama","object":"model","root":"meta-llama/Llama-3.1-8B","parent":null},
{"id":"sql-lora","object":"model","root":"/adapters/sql","parent":"llama"},
{"id":"alias","object":"model","root":"meta-llama/Llama-3.1-8B","parent":null},
{"id":"chat-lora","object":"model","root":"/adapters/chat","parent":"llama"}]}`

func TestParseModels(t *testing.T) {
	tests := map[string]struct {
		body    string
		want    *registry.Served
		wantErr bool
	}{
		"vLLM with adapters": {
			body: modelsBody,
			want: &registry.Served{
				Bases:    []string{"alias", "llama"},
				Adapters: []registry.Adapter{{Name: "chat-lora", Parent: "llama"}, {Name: "sql-lora", Parent: "llama"}},
				Complete: true,
			},
		},
		"no parent field (SGLang, OpenAI)": {
			body: `{"data":[{"id":"qwen"},{"id":""},{"id":"qwen"}]}`,
			want: &registry.Served{Bases: []string{"qwen"}, Complete: true},
		},
		"a name listed as both stays a base": {
			body: `{"data":[{"id":"a","parent":"b"},{"id":"a"},{"id":"b"}]}`,
			want: &registry.Served{Bases: []string{"a", "b"}, Complete: true},
		},
		"not a list":    {body: `<html>`, wantErr: true},
		"wrong types":   {body: `{"data":[{"id":3}]}`, wantErr: true},
		"empty is none": {body: `{"data":[]}`, want: &registry.Served{Complete: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseModels([]byte(tc.body))
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseModels() error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseModels() (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseModels checks that ParseModels never panics and returns sorted,
// distinct, bounded lists.
func FuzzParseModels(f *testing.F) {
	for _, seed := range []string{modelsBody, `{"data":[{"id":"a","parent":"a"}]}`, `{"data":null}`, `[]`, `{"data":[{"id":"x","parent":""}]}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ParseModels(body)
		if err != nil {
			return
		}
		if len(s.Bases)+len(s.Adapters) > maxModelsCount {
			t.Fatalf("%d names, over the cap", len(s.Bases)+len(s.Adapters))
		}
		for i, b := range s.Bases {
			if b == "" || len(b) > maxModelName || i > 0 && s.Bases[i-1] >= b {
				t.Fatalf("bases not sorted, distinct and bounded: %q", s.Bases)
			}
		}
		for i, a := range s.Adapters {
			if a.Name == "" || i > 0 && s.Adapters[i-1].Name >= a.Name || s.ServesBase(a.Name) || !s.Serves(a.Name) {
				t.Fatalf("adapters not sorted, distinct and apart from bases: %+v", s.Adapters)
			}
		}
	})
}

func TestScraperReadsServedModelsAndLoRA(t *testing.T) {
	page := vllmPage(pageSpec{models: []string{"llama"}, waiting: 1, running: 1, kv: 0.1}) +
		`vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql-lora",waiting_lora_adapters="chat-lora,sql-lora"} 1.75e+09` + "\n"
	srv := newModelServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = w.Write([]byte(modelsBody))
			return
		}
		_, _ = w.Write([]byte(page))
	})
	reg := registry.New()
	w := registrytest.Upsert(reg, endpoint("a", srv.addr()))
	startScraper(t, reg, WithModelsInterval(time.Hour))

	eventually(t, "metrics on the worker", func() bool { return w.Metrics() != nil })
	m := w.Metrics()
	if !m.Served.Serves("sql-lora") || !m.Served.Serves("alias") || m.Served.Serves("qwen") || !m.Served.Complete {
		t.Errorf("Served = %+v; want llama, alias, sql-lora and chat-lora, complete", m.Served)
	}
	if p, _ := m.Served.Parent("chat-lora"); p != "llama" {
		t.Errorf("Parent(chat-lora) = %q, want llama", p)
	}
	if diff := cmp.Diff(&registry.LoRA{Max: 2, Active: []string{"chat-lora", "sql-lora"}}, m.LoRA); diff != "" {
		t.Errorf("LoRA (-want +got):\n%s", diff)
	}
	// A later scrape with the same state shares the snapshot's lists.
	first := m
	eventually(t, "a later scrape", func() bool { return w.Metrics() != first })
	if w.Metrics().LoRA != first.LoRA || w.Metrics().Served != first.Served {
		t.Errorf("an unchanged LoRA state or model list was allocated again")
	}
}

// TestScraperModelsShareTheConnection: a worker whose metrics are on its
// serving port answers /v1/models and /metrics on one connection.
func TestScraperModelsShareTheConnection(t *testing.T) {
	var conns atomic.Int32
	var models atomic.Int32
	page := pageWith(1, 1, 0.1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			models.Add(1)
			_, _ = w.Write([]byte(modelsBody))
			return
		}
		_, _ = w.Write([]byte(page))
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	reg := registry.New()
	w := registrytest.Upsert(reg, endpoint("a", netip.MustParseAddrPort(srv.Listener.Addr().String())))
	startScraper(t, reg, WithModelsInterval(time.Hour))

	eventually(t, "served models on the worker", func() bool { m := w.Metrics(); return m != nil && m.Served.Complete })
	first := w.Metrics()
	eventually(t, "a later scrape", func() bool { return w.Metrics() != first })
	if n, m := conns.Load(), models.Load(); n != 1 || m != 1 {
		t.Errorf("%d connections for %d /v1/models reads, want one connection, one read", n, m)
	}
}

func TestScraperStatusCarriesModels(t *testing.T) {
	page := vllmPage(pageSpec{models: []string{"base", "sql-lora"}, waiting: 1, running: 1, kv: 0.1})
	srv := newModelServer(t, serve(page))
	reg := registry.New()
	w := registrytest.Upsert(reg, endpoint("a", srv.addr()))
	s, _ := startScraper(t, reg)

	eventually(t, "a good scrape", func() bool { st, _ := s.Status(w); return !st.Scraped.IsZero() })
	st, ok := s.Status(w)
	if !ok || st.Err != nil {
		t.Fatalf("Status() = %+v, %v; want a good scrape", st, ok)
	}
	if diff := cmp.Diff([]string{"base", "sql-lora"}, st.Report.Models); diff != "" {
		t.Errorf("Status().Report.Models (-want +got):\n%s", diff)
	}
}

// A model server that restarted (in place, at the same address) lost the
// adapters loaded at run time: its model list is read again at once, not
// at the next models interval, and the restart is counted on the worker so
// the policy forgets the adapters it sent to the earlier run. A restart
// shows as cumulative counters going back, or as the LoRA report leaving
// the page.
func TestScraperNoticesARestartedServer(t *testing.T) {
	const lora = `vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql-lora",waiting_lora_adapters=""} 1.75e+09` + "\n"
	const onlyBase = `{"data":[{"id":"llama","parent":null}]}`
	tests := map[string]struct{ before, after string }{
		"counters went back": {
			before: "vllm:num_requests_running 1\nvllm:prompt_tokens_total 5000\n" + lora,
			after:  "vllm:num_requests_running 0\nvllm:prompt_tokens_total 12\n" + lora,
		},
		"the LoRA report is gone": {
			before: "vllm:num_requests_running 1\nvllm:prompt_tokens_total 5000\n" + lora,
			after:  "vllm:num_requests_running 1\nvllm:prompt_tokens_total 5000\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			handler := func(models, page string) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/v1/models" {
						_, _ = w.Write([]byte(models))
						return
					}
					_, _ = w.Write([]byte(page))
				}
			}
			srv := newModelServer(t, handler(modelsBody, tc.before))
			reg := registry.New()
			w := registrytest.Upsert(reg, endpoint("a", srv.addr()))
			startScraper(t, reg, WithModelsInterval(time.Hour))
			eventually(t, "the adapters on the worker", func() bool { m := w.Metrics(); return m != nil && m.Served.Serves("sql-lora") })
			// A later scrape of the same run is no restart.
			first := w.Metrics()
			eventually(t, "a later scrape", func() bool { return w.Metrics() != first })
			if n := w.Metrics().Restarts; n != 0 {
				t.Fatalf("Restarts = %d before any restart, want 0", n)
			}

			srv.set(handler(onlyBase, tc.after))
			eventually(t, "the restarted server's model list", func() bool {
				m := w.Metrics()
				return !m.Served.Serves("sql-lora") && m.Served.ServesBase("llama")
			})
			if n := w.Metrics().Restarts; n != 1 {
				t.Errorf("Restarts = %d after one restart, want 1", n)
			}
		})
	}
}

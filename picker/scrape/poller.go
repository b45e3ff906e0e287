package scrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
)

// reason classifies a failed scrape.
type reason uint8

const (
	reasonTimeout  reason = iota // no complete answer within the timeout
	reasonConnect                // connection refused, reset, DNS, ...
	reasonStatus                 // a status other than 200
	reasonTooLarge               // body over the size cap
	reasonParse                  // no model-server metrics in the body
	numReasons
)

var reasonNames = [numReasons]string{"timeout", "connect", "status", "body_too_large", "parse"}

func (r reason) String() string { return reasonNames[r] }

// scrapeError is a failed scrape with its reason.
type scrapeError struct {
	reason reason
	err    error
}

func (e *scrapeError) Error() string { return e.err.Error() }
func (e *scrapeError) Unwrap() error { return e.err }

// poller scrapes one worker, one request at a time.
type poller struct {
	s       *Scraper
	w       *registry.Worker
	url     string // the metrics page, as the worker's OwnMetrics was own
	own     bool
	created time.Time
	cancel  context.CancelFunc // set when launched
	done    chan struct{}      // closed when run returns
	due     chan struct{}      // a scrape is due; see Scraper.tick
	page    *pageConn          // the poller's connection; nil with WithHTTPClient
	buf     bytes.Buffer       // body buffer, reused across scrapes
	body    io.LimitedReader   // reused reader over the response body

	// Served models and LoRA state, touched by the poller's goroutine only.
	modelsURL   string
	modelsReq   []byte // GET /v1/models over page; nil when it is on another port
	modelsAt    time.Time
	models      *registry.Served // last good /v1/models answer
	fromMetrics *registry.Served
	lora        *registry.LoRA
	restarts    uint32 // restarts of the server seen: see restarted

	// The scrapes failed in a row and when the first of them ended, for
	// the lines logged as they start failing and work again; touched by
	// the poller's goroutine only.
	failures     uint64
	failingSince time.Time

	status    atomic.Pointer[Status]
	errors    [numReasons]atomic.Uint64
	malformed atomic.Uint64
}

func newPoller(s *Scraper, w *registry.Worker) *poller {
	p := &poller{
		s:         s,
		w:         w,
		modelsURL: modelsURL(w),
		created:   s.opts.clock.Now(),
		done:      make(chan struct{}),
		due:       make(chan struct{}, 1),
	}
	ep := w.Endpoint()
	p.url, p.own = metricsURL(ep, s.opts.metricsPort, s.opts.path), ep.OwnMetrics
	if s.ownClient {
		if u, err := url.Parse(p.url); err == nil {
			p.page = newPageConn(u.Host, u.RequestURI(), s.opts.timeout)
			p.modelsReq = p.modelsRequest(u)
		}
	}
	return p
}

// metricsURL is the metrics page of the endpoint ep: its IP, the metrics
// port (its serving port when that is 0 or ep serves its own metrics:
// OwnMetrics) and path.
func metricsURL(ep registry.Endpoint, port uint16, path string) string {
	addr := ep.Address
	if port != 0 && !ep.OwnMetrics {
		addr = netip.AddrPortFrom(addr.Addr(), port)
	}
	return (&url.URL{Scheme: "http", Host: addr.String(), Path: path}).String()
}

// modelsRequest is the request of /v1/models over the poller's connection
// to the metrics page u, nil when the models are on another port.
func (p *poller) modelsRequest(u *url.URL) []byte {
	if m, err := url.Parse(p.modelsURL); err == nil && m.Host == u.Host {
		return request(m.Host, m.RequestURI(), "application/json")
	}
	return nil
}

// follow points the poller at the worker's metrics page again when the
// worker's OwnMetrics changed since it last did (its pool gained or lost
// target ports): the worker stays, its page moves.
func (p *poller) follow() {
	if p.w.OwnMetrics() == p.own {
		return
	}
	ep := p.w.Endpoint()
	p.url, p.own = metricsURL(ep, p.s.opts.metricsPort, p.s.opts.path), ep.OwnMetrics
	if p.page == nil {
		return
	}
	if u, err := url.Parse(p.url); err == nil {
		p.page.retarget(u.Host, u.RequestURI())
		p.modelsReq = p.modelsRequest(u)
	}
}

// stop ends the poller if it was launched; it does not wait.
func (p *poller) stop() {
	if p.cancel != nil {
		p.cancel()
	}
}

// kick asks for a scrape. It never waits: a scrape already due stays the
// only one.
func (p *poller) kick() {
	select {
	case p.due <- struct{}{}:
	default:
	}
}

// run scrapes each time one is due until ctx ends.
func (p *poller) run(ctx context.Context) {
	defer close(p.done)
	if p.page != nil {
		stop := context.AfterFunc(ctx, p.page.abort)
		defer stop()
		defer p.page.close()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.due:
		}
		p.scrape(ctx)
	}
}

// scrape fetches the page once and records the outcome. On failure the
// worker keeps its previous metrics, whose Scraped time then ages.
func (p *poller) scrape(ctx context.Context) {
	p.follow()
	start := time.Now()
	pre, dec := p.w.Load()
	rep, err := p.fetch(ctx)
	if ctx.Err() != nil {
		return // removed or stopping: nobody wants this result
	}
	p.s.duration.Observe(time.Since(start).Seconds())
	prev := p.status.Load()
	if err != nil {
		var se *scrapeError
		if errors.As(err, &se) {
			p.errors[se.reason].Add(1)
		}
		p.failed(se, err)
		st := &Status{Err: err}
		if prev != nil {
			st.Report, st.Scraped = prev.Report, prev.Scraped
		}
		p.status.Store(st)
		return
	}
	now := p.s.opts.clock.Now()
	if p.failures > 0 {
		p.s.opts.log.Info("Scraping a worker's metrics works again", "worker", p.w.Address(), "address", p.url,
			"failures", p.failures, "failingFor", now.Sub(p.failingSince).String())
		p.failures = 0
	}
	if prev != nil && !prev.Scraped.IsZero() && restarted(&prev.Report, &rep) {
		// The model list of the earlier run no longer holds: read it
		// again now, and until then go by the page's.
		p.restarts++
		p.models, p.modelsAt = nil, time.Time{}
	}
	p.malformed.Add(uint64(rep.Malformed))
	p.status.Store(&Status{Report: rep, Scraped: now})
	p.w.SetMetrics(&registry.Metrics{
		Waiting:      rep.Waiting,
		Running:      rep.Running,
		KVUsage:      rep.KVUsage,
		BlockSize:    rep.BlockSize,
		NumGPUBlocks: rep.NumGPUBlocks,
		Served:       p.served(ctx, &rep, now),
		LoRA:         p.loraState(rep.LoRA),
		Counters:     registry.Counters(rep.Counters),
		Engines:      registry.Engines(rep.Engines),
		Restarts:     p.restarts,
		Scraped:      now,
		Own:          pre + dec,
		OwnPrefill:   pre,
	})
}

// failed counts a failed scrape, and logs the first of a run of them: the
// worker's metrics age from here until a scrape works again.
func (p *poller) failed(se *scrapeError, err error) {
	p.failures++
	if p.failures > 1 {
		return
	}
	p.failingSince = p.s.opts.clock.Now()
	why := "unknown"
	if se != nil {
		why = se.reason.String()
	}
	p.s.opts.log.Info("Scraping a worker's metrics fails", "worker", p.w.Address(), "address", p.url, "reason", why, "err", err.Error())
}

// restarted reports whether page now comes from another run of the model
// server than page before: a cumulative counter went back, or the LoRA
// report left the page (vLLM keeps it once it has written one).
func restarted(before, now *Report) bool {
	b, n := before.Counters, now.Counters
	return n.PromptTokens < b.PromptTokens || n.PrefixQueries < b.PrefixQueries || n.PrefixHits < b.PrefixHits ||
		n.TierHits < b.TierHits || n.PrefillSeconds < b.PrefillSeconds || n.Prefills < b.Prefills ||
		n.DecodeSeconds < b.DecodeSeconds || n.DecodeTokens < b.DecodeTokens ||
		before.LoRA != nil && now.LoRA == nil
}

// fetch does one GET of the metrics page and parses it.
func (p *poller) fetch(ctx context.Context) (Report, error) {
	fail := func(r reason, err error) (Report, error) {
		if r != reasonParse && (errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) {
			r = reasonTimeout
		}
		return Report{}, &scrapeError{reason: r, err: fmt.Errorf("scrape %s: %w", p.url, err)}
	}
	limit := p.s.opts.maxBody
	if p.page != nil {
		deadline := time.Now().Add(p.s.opts.timeout)
		switch status, err := p.page.get(ctx, p.page.req, deadline, &p.buf, limit); {
		case errors.Is(err, errTooLarge):
			return fail(reasonTooLarge, fmt.Errorf("body is over the %d byte cap", limit))
		case err != nil:
			return fail(reasonConnect, err)
		case status != http.StatusOK:
			return fail(reasonStatus, fmt.Errorf("status %d %s", status, http.StatusText(status)))
		}
		return p.parse(fail)
	}
	ctx, cancel := context.WithTimeout(ctx, p.s.opts.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, http.NoBody)
	if err != nil {
		return fail(reasonConnect, err)
	}
	req.Header = p.s.header
	resp, err := p.s.client.Do(req)
	if err != nil {
		return fail(reasonConnect, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Read a little so that a short error page leaves the connection
		// reusable.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return fail(reasonStatus, fmt.Errorf("status %s", resp.Status))
	}
	if resp.ContentLength > limit {
		return fail(reasonTooLarge, fmt.Errorf("body of %d bytes is over the %d byte cap", resp.ContentLength, limit))
	}
	p.buf.Reset()
	p.body = io.LimitedReader{R: resp.Body, N: limit + 1}
	n, err := p.buf.ReadFrom(&p.body)
	p.body.R = nil
	if err != nil {
		return fail(reasonConnect, fmt.Errorf("read body: %w", err))
	}
	if n > limit {
		return fail(reasonTooLarge, fmt.Errorf("body is over the %d byte cap", limit))
	}
	return p.parse(fail)
}

// parse reads the fetched page in p.buf, sharing the last report's model
// list when the page names the same models.
func (p *poller) parse(fail func(reason, error) (Report, error)) (Report, error) {
	var prevModels []string
	if st := p.status.Load(); st != nil {
		prevModels = st.Report.Models
	}
	rep, err := p.s.opts.schema.parse(p.buf.Bytes(), prevModels)
	if err != nil {
		return fail(reasonParse, err)
	}
	return rep, nil
}

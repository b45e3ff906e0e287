package scrape

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
)

// DefaultModelsInterval is how often a worker's /v1/models is read: the
// models a server answers to change only when an adapter is loaded or
// unloaded at run time.
const DefaultModelsInterval = 10 * time.Second

// Bounds of a /v1/models answer, whatever the server sends.
const (
	maxModelsBody  = 1 << 20
	maxModelsCount = 4096
	maxModelName   = 512
)

// errModels marks a /v1/models answer that could not be used.
var errModels = errors.New("unusable /v1/models answer")

// modelsPage is the part of an OpenAI /v1/models body read: vLLM lists its
// served names with a null parent and its LoRA adapters with the base model
// as parent.
type modelsPage struct {
	Data []struct {
		ID     string  `json:"id"`
		Parent *string `json:"parent"`
	} `json:"data"`
}

// ParseModels reads a /v1/models body: entries with a parent are adapters,
// the others base models. Empty and overlong names are skipped; a body of
// more than 4096 entries or that is not such a list is an error.
func ParseModels(body []byte) (*registry.Served, error) {
	var page modelsPage
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, fmt.Errorf("%w: %w", errModels, err)
	}
	if len(page.Data) > maxModelsCount {
		return nil, fmt.Errorf("%w: %d models, more than %d", errModels, len(page.Data), maxModelsCount)
	}
	s := &registry.Served{}
	for _, m := range page.Data {
		if m.ID == "" || len(m.ID) > maxModelName {
			continue
		}
		if m.Parent == nil || *m.Parent == "" || *m.Parent == m.ID {
			s.Bases = append(s.Bases, m.ID)
			continue
		}
		parent := *m.Parent
		if len(parent) > maxModelName {
			parent = ""
		}
		s.Adapters = append(s.Adapters, registry.Adapter{Name: m.ID, Parent: parent})
	}
	slices.Sort(s.Bases)
	s.Bases = slices.Compact(s.Bases)
	slices.SortFunc(s.Adapters, func(a, b registry.Adapter) int { return cmp.Compare(a.Name, b.Name) })
	s.Adapters = slices.CompactFunc(s.Adapters, func(a, b registry.Adapter) bool { return a.Name == b.Name })
	// A name listed as both keeps its base entry.
	s.Adapters = slices.DeleteFunc(s.Adapters, func(a registry.Adapter) bool { return s.ServesBase(a.Name) })
	if len(s.Adapters) == 0 {
		s.Adapters = nil
	}
	s.Complete = true
	return s, nil
}

// modelsURL is the worker's /v1/models, on its serving port.
func modelsURL(w *registry.Worker) string {
	return (&url.URL{Scheme: "http", Host: w.Address(), Path: "/v1/models"}).String()
}

// fetchModels reads the worker's /v1/models once: over the poller's own
// connection when the metrics are on the serving port, else with the
// Scraper's HTTP client.
func (p *poller) fetchModels(ctx context.Context) (*registry.Served, error) {
	if p.modelsReq != nil {
		status, err := p.page.get(ctx, p.modelsReq, time.Now().Add(p.s.opts.timeout), &p.buf, maxModelsBody)
		switch {
		case errors.Is(err, errTooLarge):
			return nil, fmt.Errorf("%w: body over %d bytes", errModels, maxModelsBody)
		case err != nil:
			return nil, err
		case status != http.StatusOK:
			return nil, fmt.Errorf("%w: status %d %s", errModels, status, http.StatusText(status))
		}
		return ParseModels(p.buf.Bytes())
	}
	ctx, cancel := context.WithTimeout(ctx, p.s.opts.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.modelsURL, http.NoBody)
	if err != nil {
		return nil, err
	}
	resp, err := p.s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxModelsBody+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: status %s", errModels, resp.Status)
	}
	if len(body) > maxModelsBody {
		return nil, fmt.Errorf("%w: body over %d bytes", errModels, maxModelsBody)
	}
	return ParseModels(body)
}

// served returns what the worker serves: the last /v1/models answer when
// there is one, refreshed every models interval; else the model names on
// its metrics, as bases of an incomplete list; else nil.
func (p *poller) served(ctx context.Context, rep *Report, now time.Time) *registry.Served {
	if p.s.opts.modelsInterval > 0 && (p.modelsAt.IsZero() || now.Sub(p.modelsAt) >= p.s.opts.modelsInterval) {
		p.modelsAt = now
		if s, err := p.fetchModels(ctx); err == nil {
			p.models = s
		}
	}
	if p.models != nil {
		return p.models
	}
	if len(rep.Models) == 0 {
		return nil
	}
	if p.fromMetrics == nil || !slices.Equal(p.fromMetrics.Bases, rep.Models) {
		p.fromMetrics = &registry.Served{Bases: rep.Models}
	}
	return p.fromMetrics
}

// loraState turns the reported adapter state into the registry's form,
// reusing the previous one when nothing changed.
func (p *poller) loraState(info *LoRAInfo) *registry.LoRA {
	if info == nil {
		return nil
	}
	prev := p.lora
	n := len(info.Running) + len(info.Waiting)
	if prev != nil && prev.Max == info.MaxLoRA && len(prev.Active) <= n {
		same := true
		for _, names := range [2][]string{info.Running, info.Waiting} {
			for _, name := range names {
				if !prev.Has(name) {
					same = false
				}
			}
		}
		if same && len(prev.Active) == countDistinct(info) {
			return prev
		}
	}
	active := make([]string, 0, n)
	active = append(active, info.Running...)
	active = append(active, info.Waiting...)
	slices.Sort(active)
	p.lora = &registry.LoRA{Max: info.MaxLoRA, Active: slices.Compact(active)}
	return p.lora
}

func countDistinct(info *LoRAInfo) int {
	n := len(info.Running)
	for _, w := range info.Waiting {
		if !slices.Contains(info.Running, w) {
			n++
		}
	}
	return n
}

package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/openai"
)

// LoRAModule is an adapter the server answers to: a request whose model is
// Name runs with it. Path is reported as the adapter's root; Base names the
// base model it belongs to (default: the first served name).
type LoRAModule struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Base string `json:"base_model_name,omitempty"`
}

// ParseLoRAModule reads one --lora-modules value as vLLM does: name=path,
// or a JSON object with name, path and optionally base_model_name.
func ParseLoRAModule(v string) (LoRAModule, error) {
	var m LoRAModule
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return m, fmt.Errorf("lora module %q: %w", v, err)
		}
	} else {
		name, path, ok := strings.Cut(v, "=")
		if !ok {
			return m, fmt.Errorf("lora module %q: want name=path or a JSON object", v)
		}
		m = LoRAModule{Name: name, Path: path}
	}
	if m.Name == "" || m.Path == "" {
		return m, fmt.Errorf("lora module %q: name and path must not be empty", v)
	}
	return m, nil
}

// adapter is a registered LoRA adapter.
type adapter struct {
	LoRAModule
	created int64
}

// register adds m and loads it (no cost: the server is starting).
func (s *Server) register(m LoRAModule) error {
	if m.Base == "" {
		m.Base = s.cfg.Model
	}
	if !slices.Contains(s.cfg.ServedModelNames, m.Base) {
		return fmt.Errorf("lora module %q: base model %q is not served", m.Name, m.Base)
	}
	if slices.Contains(s.cfg.ServedModelNames, m.Name) || s.lookupAdapter(m.Name) {
		return fmt.Errorf("lora module %q: the name is taken", m.Name)
	}
	s.adapters = append(s.adapters, adapter{LoRAModule: m, created: time.Now().Unix()})
	for _, e := range s.cfg.Engines {
		e.Preload(m.Name)
	}
	return nil
}

func (s *Server) lookupAdapter(name string) bool {
	return slices.ContainsFunc(s.adapters, func(a adapter) bool { return a.Name == name })
}

// resolve maps a request's model to the name echoed in responses and the
// adapter to run with; ok is false when nothing by that name is served.
// An empty model is the base model.
func (s *Server) resolve(model string) (echo, lora string, ok bool) {
	if model == "" || slices.Contains(s.cfg.ServedModelNames, model) {
		return s.cfg.Model, "", true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lookupAdapter(model) {
		return model, model, true
	}
	return "", "", false
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	maxLen := s.maxModelLen()
	list := openai.ModelList{Object: "list"}
	for _, name := range s.cfg.ServedModelNames {
		list.Data = append(list.Data, openai.Model{
			ID: name, Object: "model", Created: s.started, OwnedBy: "vllm",
			Root: s.cfg.Model, MaxModelLen: maxLen,
		})
	}
	s.mu.Lock()
	for _, a := range s.adapters {
		parent := a.Base
		list.Data = append(list.Data, openai.Model{
			ID: a.Name, Object: "model", Created: a.created, OwnedBy: "vllm",
			Root: a.Path, Parent: &parent, MaxModelLen: maxLen,
		})
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

// loadRequest is the body of POST /v1/load_lora_adapter (and, without a
// path, of /v1/unload_lora_adapter).
type loadRequest struct {
	Name string `json:"lora_name"`
	Path string `json:"lora_path"`
	ID   *int   `json:"lora_int_id"`
}

func readLoadRequest(w http.ResponseWriter, r *http.Request) (loadRequest, error) {
	var req loadRequest
	body, err := readBody(r, w)
	if err != nil {
		return req, err
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, fmt.Errorf("%w: %w", openai.ErrBadRequest, err)
	}
	return req, nil
}

// handleLoadLoRA registers an adapter at run time and loads it, answering
// as vLLM does: plain text on success, an error object otherwise.
func (s *Server) handleLoadLoRA(w http.ResponseWriter, r *http.Request) {
	req, err := readLoadRequest(w, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	if req.Name == "" || req.Path == "" {
		writeError(w, http.StatusBadRequest, "", "Both 'lora_name' and 'lora_path' must be provided.")
		return
	}
	s.mu.Lock()
	if s.lookupAdapter(req.Name) || slices.Contains(s.cfg.ServedModelNames, req.Name) {
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, "", "The lora adapter '"+req.Name+"' has already been loaded.")
		return
	}
	s.adapters = append(s.adapters, adapter{
		LoRAModule: LoRAModule{Name: req.Name, Path: req.Path, Base: s.cfg.Model},
		created:    time.Now().Unix(),
	})
	s.mu.Unlock()
	for _, e := range s.cfg.Engines {
		e.LoadAdapter(req.Name)
	}
	writeText(w, http.StatusOK, "Success: LoRA adapter '"+req.Name+"' added successfully.")
}

// handleUnloadLoRA forgets an adapter; requests naming it get 404 from then
// on.
func (s *Server) handleUnloadLoRA(w http.ResponseWriter, r *http.Request) {
	req, err := readLoadRequest(w, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	if req.Name == "" && req.ID == nil {
		writeError(w, http.StatusBadRequest, "", "either 'lora_name' and 'lora_int_id' needs to be provided.")
		return
	}
	s.mu.Lock()
	n := len(s.adapters)
	s.adapters = slices.DeleteFunc(s.adapters, func(a adapter) bool { return a.Name == req.Name })
	removed := len(s.adapters) < n
	s.mu.Unlock()
	if !removed {
		writeError(w, http.StatusNotFound, "", "The lora adapter '"+req.Name+"' cannot be found.")
		return
	}
	for _, e := range s.cfg.Engines {
		e.UnloadAdapter(req.Name)
	}
	writeText(w, http.StatusOK, "Success: LoRA adapter '"+req.Name+"' removed successfully.")
}

func writeText(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(text))
}

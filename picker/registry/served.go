package registry

import (
	"slices"
	"strings"
)

// Serves reports whether the worker serves model, as a base model or an
// adapter, looking through the sorted lists without allocating.
func (s *Served) Serves(model string) bool {
	if s == nil {
		return false
	}
	if _, ok := slices.BinarySearch(s.Bases, model); ok {
		return true
	}
	_, ok := s.adapter(model)
	return ok
}

// Parent returns the base model of adapter name, if the worker lists it
// with one.
func (s *Served) Parent(name string) (string, bool) {
	if s == nil {
		return "", false
	}
	i, ok := s.adapter(name)
	if !ok || s.Adapters[i].Parent == "" {
		return "", false
	}
	return s.Adapters[i].Parent, true
}

// ServesBase reports whether base is one of the worker's base models.
func (s *Served) ServesBase(base string) bool {
	if s == nil {
		return false
	}
	_, ok := slices.BinarySearch(s.Bases, base)
	return ok
}

func (s *Served) adapter(name string) (int, bool) {
	return slices.BinarySearchFunc(s.Adapters, name, func(a Adapter, n string) int { return strings.Compare(a.Name, n) })
}

// Has reports whether adapter name is in use (running or waiting) on the
// worker.
func (l *LoRA) Has(name string) bool {
	if l == nil {
		return false
	}
	_, ok := slices.BinarySearch(l.Active, name)
	return ok
}

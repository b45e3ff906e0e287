// Package registrytest adds and finds single workers in a registry for
// tests, through the registry's own Update, as the controllers change it.
package registrytest

import "github.com/inferpick/inferpick/picker/registry"

// Upsert adds ep to reg (or updates it) and returns its worker.
func Upsert(reg *registry.Registry, ep registry.Endpoint) *registry.Worker {
	reg.Update([]registry.Endpoint{ep}, nil)
	w, ok := Find(reg, ep.Key)
	if !ok {
		panic("registrytest: the upserted endpoint " + ep.Name + " is not in the registry")
	}
	return w
}

// Remove detaches the worker keyed key, if present.
func Remove(reg *registry.Registry, key registry.Key) {
	reg.Update(nil, []registry.Key{key})
}

// Find returns the worker keyed key in reg's current snapshot.
func Find(reg *registry.Registry, key registry.Key) (*registry.Worker, bool) {
	for _, w := range reg.Workers() {
		if w.Endpoint().Key == key {
			return w, true
		}
	}
	return nil, false
}

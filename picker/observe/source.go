package observe

import "github.com/inferpick/inferpick/picker/registry"

// Workers is the part of the worker registry the collectors read.
type Workers interface {
	// AllWorkers returns the current workers, parked ones too.
	AllWorkers() []*registry.Worker
}

// SyncedWorkers is the part of the worker registry /debug/workers reads.
type SyncedWorkers interface {
	Workers
	// Synced reports whether the registry has caught up with its source.
	Synced() bool
}

var _ SyncedWorkers = (*registry.Registry)(nil)

// Package flowcontrol holds requests the pool cannot serve right now in a
// bounded, priority-ordered queue instead of rejecting them at once.
package flowcontrol

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxBandLen = 256
	DefaultMaxLen     = 1024
	DefaultMaxBytes   = 64 << 20
	DefaultMaxWait    = 30 * time.Second
)

// Orders of the waiters of one flow (Options.Ordering).
const (
	// OrderFCFS serves a flow's waiters first come, first served, as
	// upstream's fcfs-ordering-policy.
	OrderFCFS = "fcfs"
	// OrderDeadline serves a flow's waiters by their Item.Deadline,
	// earliest first, then those without one; first come, first served
	// among equal deadlines. Upstream's slo-deadline-ordering-policy.
	OrderDeadline = "slo-deadline"
)

// Options are the bounds of the queue. A zero field takes its default.
type Options struct {
	// Enabled puts the queue in the request path (the picker's
	// --flow-control); the bounds below apply only then.
	Enabled bool
	// MaxBandLen bounds the waiters of one priority.
	MaxBandLen int
	// MaxLen bounds the waiters of all priorities together.
	MaxLen int
	// MaxBytes bounds the request bytes held by all waiters together.
	MaxBytes int64
	// MaxWait bounds how long one request waits before it is turned away.
	MaxWait time.Duration
	// ReservedSlots is capacity on every endpoint that requests of priority
	// 0 and below leave free: in-flight places under the policy's
	// maxInFlight and waiting places under its queue threshold. Prioritized
	// requests then find room at once while default and sheddable traffic
	// wait; 0 reserves nothing.
	ReservedSlots int
	// Ordering is the order a flow's waiters are served in: OrderFCFS
	// (the default) or OrderDeadline. Bands stay strictly by priority,
	// and a band's flows take turns, either way.
	Ordering string
}

// Reserve is the capacity a request of the given priority leaves free.
func (o *Options) Reserve(priority int) int {
	if !o.Enabled || priority > 0 {
		return 0
	}
	return o.ReservedSlots
}

// Complete fills zero fields with their defaults.
func (o *Options) Complete() {
	if o.MaxBandLen == 0 {
		o.MaxBandLen = DefaultMaxBandLen
	}
	if o.MaxLen == 0 {
		o.MaxLen = DefaultMaxLen
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Ordering == "" {
		o.Ordering = OrderFCFS
	}
}

// Validate reports bounds that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.MaxBandLen < 0 {
		errs = append(errs, fmt.Errorf("max band length %d is negative", o.MaxBandLen))
	}
	if o.MaxLen < 0 {
		errs = append(errs, fmt.Errorf("max length %d is negative", o.MaxLen))
	}
	if o.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("max bytes %d is negative", o.MaxBytes))
	}
	if o.ReservedSlots < 0 {
		errs = append(errs, fmt.Errorf("reserved slots %d is negative", o.ReservedSlots))
	}
	if o.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("max wait %s is negative", o.MaxWait))
	}
	if o.Ordering != OrderFCFS && o.Ordering != OrderDeadline {
		errs = append(errs, fmt.Errorf("ordering %q is not %s or %s", o.Ordering, OrderFCFS, OrderDeadline))
	}
	return errors.Join(errs...)
}

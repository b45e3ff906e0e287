package flowcontrol

import "flag"

// AddFlags registers the bounds on fs; unset fields show their defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Complete()
	fs.BoolVar(&o.Enabled, "flow-control", o.Enabled, "Queue requests that find every endpoint saturated, by InferenceObjective priority and fairness id, instead of routing them past the queue and KV-cache thresholds (priority 0 and above) or answering 429 at once (negative priorities, or every endpoint at maxInFlight).")
	fs.IntVar(&o.MaxBandLen, "flow-control-max-band-requests", o.MaxBandLen, "Requests of one priority that may wait in the flow-control queue.")
	fs.IntVar(&o.MaxLen, "flow-control-max-requests", o.MaxLen, "Requests of all priorities that may wait in the flow-control queue.")
	fs.Int64Var(&o.MaxBytes, "flow-control-max-bytes", o.MaxBytes, "Request bytes all waiting requests may hold together.")
	fs.IntVar(&o.ReservedSlots, "flow-control-reserved-slots", o.ReservedSlots, "Capacity per endpoint (in-flight places under maxInFlight, waiting places under the queue threshold) that requests of priority 0 and below leave free for prioritized requests.")
	fs.StringVar(&o.Ordering, "flow-control-ordering", o.Ordering, "Order in which the waiting requests of one flow (fairness id) are served: fcfs, first come first served; or slo-deadline, earliest deadline first (arrival plus the x-slo-ttft-ms header), requests without the header after those with it. Priorities stay strict and flows take turns either way.")
	fs.DurationVar(&o.MaxWait, "flow-control-max-wait", o.MaxWait, "Longest a request waits for capacity before it gets 429.")
}

package gateway

import (
	"sync/atomic"
	"time"
)

// Record describes one finished downstream request, for tests and benchmarks.
type Record struct {
	Method string
	Path   string
	// Status is the status written to the client; 0 when the client went away or
	// the downstream stream was reset before any status.
	Status int
	// GRPCStatus is the grpc-status sent to a gRPC client, in the trailers or
	// in a trailers-only response ("" when none was).
	GRPCStatus string
	// ExtProcStreams is the number of ext_proc streams opened: 1, or 0 when the
	// stream could not be opened.
	ExtProcStreams int
	// Picker is the address of the picker replica that took the stream.
	Picker string
	// Immediate is true when the picker answered with an ImmediateResponse.
	Immediate bool
	// Endpoints is the destination list the picker returned (primary first).
	Endpoints []string
	// Routed runs from the request's arrival to the picker's destination
	// reaching the gateway (zero when none did). A request with a body is
	// routed once its body has been read, which may be long after it
	// arrived.
	Routed time.Duration
	// Attempts are the upstream attempts in order.
	Attempts []Attempt
	// Served is the endpoint whose response reached the client.
	Served string
	// DynamicMetadata is the envoy.lb namespace of the request's dynamic
	// metadata at its end: what the picker's replies set there, the
	// destination and any attribute reported with the end of the response
	// (numbers are float64), as an access log would read it.
	DynamicMetadata map[string]any
	// ProcessingError is the ext_proc failure, if any.
	ProcessingError error
	// FailedOpen is true when FailOpen let the request continue unprocessed.
	FailedOpen bool
	// ClientGone is true when the downstream client went away first.
	ClientGone bool
	// Reset is true when the downstream stream was reset after headers were sent.
	Reset bool
	// UpstreamReset is true when the upstream connection ended in the middle
	// of its response (the cause of the downstream reset).
	UpstreamReset bool
	// TimeToFirstByte runs from the request's arrival to the first body byte written
	// to the client (zero when there was none).
	TimeToFirstByte time.Duration
	// Duration runs from the request's arrival to the end of the handler.
	Duration time.Duration
}

// Attempt is one upstream attempt.
type Attempt struct {
	Endpoint string
	// Status is the upstream status, 0 when no response came.
	Status int
	// Err describes a failure before response headers.
	Err string
}

// Counters are running totals over all requests; read them with Gateway.Counters.
type Counters struct {
	Requests                int64
	StreamsOpened           int64
	ImmediateResponses      int64
	ProcessingErrors        int64
	MessageTimeouts         int64
	FailedOpen              int64
	UpstreamAttempts        int64
	Retries                 int64
	ConnectFailures         int64
	RejectedHeaderMutations int64
	SpuriousMessages        int64
	ClientDisconnects       int64
	// PickerEjections counts picker replicas ejected by outlier detection.
	PickerEjections int64
}

type counters struct {
	requests, streams, immediate, procErrors, timeouts, failedOpen atomic.Int64
	attempts, retries, connectFailures, rejected, spurious, gone   atomic.Int64
	ejections                                                      atomic.Int64
}

func (c *counters) snapshot() Counters {
	return Counters{
		Requests:                c.requests.Load(),
		StreamsOpened:           c.streams.Load(),
		ImmediateResponses:      c.immediate.Load(),
		ProcessingErrors:        c.procErrors.Load(),
		MessageTimeouts:         c.timeouts.Load(),
		FailedOpen:              c.failedOpen.Load(),
		UpstreamAttempts:        c.attempts.Load(),
		Retries:                 c.retries.Load(),
		ConnectFailures:         c.connectFailures.Load(),
		RejectedHeaderMutations: c.rejected.Load(),
		SpuriousMessages:        c.spurious.Load(),
		ClientDisconnects:       c.gone.Load(),
		PickerEjections:         c.ejections.Load(),
	}
}

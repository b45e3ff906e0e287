package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// The pool's Events state its ready endpoint count, which changes in bursts:
// a rolling restart of N pods changes it about 2N times. The manager's
// recorder, with client-go's default correlation, writes 25 Events per
// object and type and then one per 5 minutes, dropping the rest without a
// word, so the pool's last Event stated a count long gone. The picker
// records its Events through a recorder of its own instead:
//
//   - the reconciler spaces the pool's Events by eventInterval itself, and
//     a count that changes sooner is recorded once the interval is over,
//     as it then is (so none is dropped, and the last is the current one);
//   - the spam filter lets that rate through and drops only what is faster;
//   - all the Events of one reason on one object are one Event object,
//     patched with the latest message and a count, so a burst of changes
//     writes one object, and `kubectl describe` shows the current count,
//     never an old one folded under "(combined from similar events)".

// eventInterval is the least time between two Events the picker records on
// the pool.
const eventInterval = time.Second

// eventCorrelation is how the picker's recorder correlates its Events,
// timed by clk.
func eventCorrelation(clk clock.PassiveClock) record.CorrelatorOptions {
	return record.CorrelatorOptions{
		// One token per eventInterval, the reconciler's own rate; the
		// burst covers the delay between an Event's recording and its
		// correlation, which can bunch two of them.
		QPS:       float32(time.Second) / float32(eventInterval),
		BurstSize: 25,
		// The first Event of a reason is already the series, and the
		// series' message is its latest Event's, as it is.
		MaxEvents:   1,
		MessageFunc: func(e *corev1.Event) string { return e.Message },
		Clock:       clk,
	}
}

// newEventRecorder returns the recorder of the picker's core Events, which
// writes them through mgr's connection until mgr stops.
func newEventRecorder(mgr ctrl.Manager) (record.EventRecorder, error) {
	events, err := typedcorev1.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("event client: %w", err)
	}
	b := record.NewBroadcaster(record.WithCorrelatorOptions(eventCorrelation(clock.RealClock{})))
	b.StartRecordingToSink(reporting{&typedcorev1.EventSinkImpl{Interface: events.Events("")}})
	log := mgr.GetLogger().WithName("events")
	b.StartEventWatcher(func(e *corev1.Event) {
		log.V(logChanges).Info("Event recorded", "object", klog.KRef(e.InvolvedObject.Namespace, e.InvolvedObject.Name),
			"kind", e.InvolvedObject.Kind, "type", e.Type, "reason", e.Reason, "message", e.Message)
	})
	if err := mgr.Add(broadcasterStop{b}); err != nil {
		b.Shutdown()
		return nil, fmt.Errorf("add event broadcaster: %w", err)
	}
	return b.NewRecorder(mgr.GetScheme(), corev1.EventSource{Component: Name}), nil
}

// reporting is a sink that names the reporting controller and instance of
// every Event it writes, from the Event's source: client-go's aggregation,
// which writes each of the picker's Events (MaxEvents 1), leaves them out,
// and tools that read events.k8s.io/v1 (kubectl events) show the reporting
// controller.
type reporting struct{ record.EventSink }

func (s reporting) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.EventSink.Create(named(e))
}

func (s reporting) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.EventSink.Update(named(e))
}

func named(e *corev1.Event) *corev1.Event {
	if e.ReportingController == "" {
		e.ReportingController, e.ReportingInstance = e.Source.Component, e.Source.Host
	}
	return e
}

// broadcasterStop shuts an event broadcaster down when the manager stops,
// on every replica, with the controllers that record Events (leader.go).
type broadcasterStop struct{ b record.EventBroadcaster }

var _ manager.LeaderElectionRunnable = broadcasterStop{}

func (s broadcasterStop) Start(ctx context.Context) error {
	<-ctx.Done()
	s.b.Shutdown()
	return nil
}

func (broadcasterStop) NeedLeaderElection() bool { return stopAfterDrain }

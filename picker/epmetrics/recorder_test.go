package epmetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestScheduledCountsByPort: picks are counted under their endpoint's
// port, including ports that share a slot of the recorder's label values.
func TestScheduledCountsByPort(t *testing.T) {
	r := NewRecorder(nil)
	for _, port := range []int32{8000, 8000, 8008, 8001, 8000, 8008} {
		r.Scheduled(0, r.Model("m"), "pod", "ns", port)
	}
	want := `
# HELP inference_extension_scheduler_attempts_total Picks attempted, by outcome and by the endpoint picked.
# TYPE inference_extension_scheduler_attempts_total counter
inference_extension_scheduler_attempts_total{namespace="ns",pod_name="pod",port="8000",status="success",target_model_name="m"} 3
inference_extension_scheduler_attempts_total{namespace="ns",pod_name="pod",port="8001",status="success",target_model_name="m"} 1
inference_extension_scheduler_attempts_total{namespace="ns",pod_name="pod",port="8008",status="success",target_model_name="m"} 2
`
	if err := testutil.CollectAndCompare(r.attempts, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

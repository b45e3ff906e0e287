//go:build vtprotobuf

package extproc

import (
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// TestCodecUsesGeneratedMarshalers: built with the vtprotobuf tag, as the
// picker is, every reply takes the codec's fast path.
func TestCodecUsesGeneratedMarshalers(t *testing.T) {
	if _, ok := any(&extprocv3.ProcessingResponse{}).(vtMarshaler); !ok {
		t.Fatal("ProcessingResponse has no vtprotobuf marshaler: the codec would fall back to reflection")
	}
}

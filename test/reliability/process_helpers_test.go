package reliability

import (
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/framework"
)

// eventually polls f until it returns nil, failing the test with f's last
// error after timeout; it returns how long that took.
func eventually(t testing.TB, timeout time.Duration, f func() error) time.Duration {
	t.Helper()
	return framework.Eventually(t, timeout, "condition", f)
}

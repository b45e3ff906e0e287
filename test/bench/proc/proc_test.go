package proc

import (
	"math"
	"os"
	"testing"
)

// The CPU time read from /proc agrees with the kernel's own account of
// this process (getrusage) over a stretch of work.
func TestCPUSecondsOfAgreesWithGetrusage(t *testing.T) {
	pid := os.Getpid()
	p0, err := CPUSecondsOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	r0 := SelfCPUSeconds()
	x := 1.0
	for SelfCPUSeconds()-r0 < 0.3 {
		for range 100_000 {
			x = math.Sqrt(x + 1)
		}
	}
	p1, err := CPUSecondsOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	r1 := SelfCPUSeconds()
	if got, want := p1-p0, r1-r0; math.Abs(got-want) > 0.05+0.1*want {
		t.Fatalf("CPU from /proc %.3f s, getrusage %.3f s (x=%g)", got, want, x)
	}
}

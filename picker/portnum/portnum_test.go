package portnum

import (
	"fmt"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]int{"1": 1, "5557": 5557, "65535": 65535, "0": 0, "65536": 0, "-1": 0, "+80": 0, "\t80": 0, "": 0, "0x50": 0, "80a": 0} {
		got, err := Parse(in)
		if got != want || (err == nil) != (want != 0) {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("port %q is not from 1 to 65535", in)) {
			t.Errorf("Parse(%q) error %q does not name the value and the range", in, err)
		}
	}
}

func TestCheckFlag(t *testing.T) {
	for n, ok := range map[int]bool{0: true, 1: true, 65535: true, 65536: false, -1: false} {
		err := CheckFlag("--x-port", n, "off")
		if (err == nil) != ok {
			t.Errorf("CheckFlag(%d) = %v, want ok %v", n, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "is not a port from 1 to 65535 (0: off)") {
			t.Errorf("CheckFlag(%d) error %q does not name the range and what 0 means", n, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1", "65535", "65536", "0", "-1", "+1", "０"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		if !Valid(n) {
			t.Fatalf("Parse(%q) = %d, not a port", s, n)
		}
	})
}

// Package portnum reads and checks the TCP port numbers that the picker's
// flags and configuration files give, so that each names the range it
// accepts alike.
package portnum

import (
	"fmt"
	"math"
	"strconv"
)

// Range is how an error names the ports accepted.
const Range = "from 1 to 65535"

// Valid reports whether n is a port: from 1 to 65535.
func Valid(n int) bool { return n >= 1 && n <= math.MaxUint16 }

// Parse reads a port written in decimal digits; its error names s and
// Range.
func Parse(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q is not %s", s, Range)
	}
	return int(n), nil
}

// CheckFlag checks the port n that the flag or field name gives, where 0
// means what zero says: nil for 0 or a port, else an error naming name,
// n, Range and zero.
func CheckFlag(name string, n int, zero string) error {
	if n == 0 || Valid(n) {
		return nil
	}
	return fmt.Errorf("%s %d is not a port %s (0: %s)", name, n, Range, zero)
}

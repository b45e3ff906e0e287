package framework

import (
	"fmt"
	"net"
	"strconv"
	"testing"
)

// FreePort returns a TCP port free on host at the time of the call.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("free port on %s: %w", host, err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreePorts returns n distinct TCP ports free on host at the time of the
// call.
func FreePorts(host string, n int) ([]int, error) {
	// Each is held open until all are chosen, so that none is chosen twice.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("free port on %s: %w", host, err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePortOn returns a port free on every one of hosts at the time of the
// call (simulated pods share the pool's target port on several loopback
// addresses).
func FreePortOn(hosts ...string) (int, error) {
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	for range 50 {
		port, err := FreePort(hosts[0])
		if err != nil {
			return 0, err
		}
		ok := true
		for _, h := range hosts[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no port free on all of %v", hosts)
}

// ConsecutivePortsT returns the first of n consecutive ports free on host
// at the time of the call (a server with several data-parallel engines
// publishes each engine's events on the port after the one before),
// failing the test when it finds none.
func ConsecutivePortsT(t testing.TB, host string, n int) int {
	t.Helper()
	for range 50 {
		first, err := FreePort(host)
		if err != nil {
			t.Fatal(err)
		}
		ok := first+n-1 <= 65535
		for p := first + 1; ok && p < first+n; p++ {
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
			if ok = err == nil; ok {
				_ = l.Close()
			}
		}
		if ok {
			return first
		}
	}
	t.Fatalf("no %d consecutive free ports on %s", n, host)
	return 0
}

// FreePortT is FreePortOn failing the test on error.
func FreePortT(t testing.TB, hosts ...string) int {
	t.Helper()
	port, err := FreePortOn(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Loopback returns n addresses 127.0.0.first, 127.0.0.first+1, ... Linux
// routes all of 127.0.0.0/8 to the loopback interface, so each simulated pod
// gets its own IP with no setup. Suites pick disjoint ranges so that their
// pods never share an address.
func Loopback(first, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = "127.0.0." + strconv.Itoa(first+i)
	}
	return out
}

// FreeAddrs returns n distinct host:port addresses whose ports were free a
// moment ago (all held open together while they are chosen, so no two are
// the same).
func FreeAddrs(host string, n int) ([]string, error) {
	addrs := make([]string, 0, n)
	var open []net.Listener
	defer func() {
		for _, l := range open {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("free port on %s: %w", host, err)
		}
		open = append(open, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

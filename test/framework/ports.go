package framework

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
)

// FreePort returns a TCP port free on host at the time of the call, and
// one that no function here returned before in this process.
func FreePort(host string) (int, error) {
	l, port, err := listenFresh(host)
	if err != nil {
		return 0, err
	}
	_ = l.Close()
	return port, nil
}

// FreePorts returns n distinct TCP ports free on host at the time of the
// call.
func FreePorts(host string, n int) ([]int, error) {
	ports := make([]int, 0, n)
	err := holdFresh(host, n, func(_ net.Listener, port int) { ports = append(ports, port) })
	return ports, err
}

// handedOut is every port the functions here returned in this process. None
// is returned twice: the kernel may give a port just closed to the next
// listener on port 0, so servers a test starts at once, each told a port
// chosen a moment before, could otherwise be told the same one.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// claim records port as handed out, reporting false if it already was.
func claim(port int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports[port] {
		return false
	}
	handedOut.ports[port] = true
	return true
}

// listenFresh listens on a port of host that was not handed out before and
// claims it; the caller closes the listener.
func listenFresh(host string) (net.Listener, int, error) {
	var taken []net.Listener // held open so the kernel offers another port
	defer func() {
		for _, l := range taken {
			_ = l.Close()
		}
	}()
	for range 64 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, 0, fmt.Errorf("free port on %s: %w", host, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if claim(port) {
			return l, port, nil
		}
		taken = append(taken, l)
	}
	return nil, 0, fmt.Errorf("free port on %s: every one offered was handed out before", host)
}

// holdFresh claims n fresh ports of host, each held open until all are
// chosen, and calls got with each.
func holdFresh(host string, n int, got func(net.Listener, int)) error {
	open := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range open {
			_ = l.Close()
		}
	}()
	for range n {
		l, port, err := listenFresh(host)
		if err != nil {
			return err
		}
		open = append(open, l)
		got(l, port)
	}
	return nil
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
			if ok = claim(p); !ok {
				break
			}
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
// moment ago (all held open together while they are chosen, and none handed
// out before).
func FreeAddrs(host string, n int) ([]string, error) {
	addrs := make([]string, 0, n)
	err := holdFresh(host, n, func(l net.Listener, _ int) { addrs = append(addrs, l.Addr().String()) })
	return addrs, err
}

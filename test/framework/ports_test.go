package framework

import (
	"net"
	"strconv"
	"sync"
	"testing"
)

// Servers a test starts at once are each told a port chosen a moment
// before: no two may be told the same one, whichever function chose it.
func TestPortsAreNeverHandedOutTwice(t *testing.T) {
	const workers, each = 8, 40
	var mu sync.Mutex
	seen := map[int]string{}
	add := func(port int, by string) {
		mu.Lock()
		defer mu.Unlock()
		if was, ok := seen[port]; ok {
			t.Errorf("port %d handed out by %s and again by %s", port, was, by)
		}
		seen[port] = by
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				by := "FreePort " + strconv.Itoa(w) + "/" + strconv.Itoa(i)
				switch i % 3 {
				case 0:
					p, err := FreePort("127.0.0.1")
					if err != nil {
						t.Error(err)
						return
					}
					add(p, by)
				case 1:
					ps, err := FreePorts("127.0.0.1", 2)
					if err != nil {
						t.Error(err)
						return
					}
					for _, p := range ps {
						add(p, "FreePorts "+by)
					}
				default:
					as, err := FreeAddrs("127.0.0.1", 2)
					if err != nil {
						t.Error(err)
						return
					}
					for _, a := range as {
						_, ps, err := net.SplitHostPort(a)
						p, _ := strconv.Atoi(ps)
						if err != nil || p == 0 {
							t.Errorf("FreeAddrs gave %q", a)
						}
						add(p, "FreeAddrs "+by)
					}
				}
			}
		})
	}
	wg.Wait()
	if want := workers * (14 + 13*2 + 13*2); len(seen) != want {
		t.Errorf("%d distinct ports, want %d", len(seen), want)
	}
}

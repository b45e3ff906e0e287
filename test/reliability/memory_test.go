package reliability

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAnnouncedBodiesHoldNoMemory opens hundreds of HTTP requests through
// the gateway that announce a 16 MiB body and send one byte. The picker
// holds a small buffer for each (its RSS stays within a few tens of MiB of
// where it was) and keeps routing a real 400 KB request meanwhile; when the
// clients go, the buffered bytes go back to zero.
func TestAnnouncedBodiesHoldNoMemory(t *testing.T) {
	const streams = 200
	const perStream = 64 << 10 // what a stream may hold before bytes arrive
	s1, s2 := startSim(t, "127.0.0.60", 0, "--num-gpu-blocks", "16384"), startSim(t, "127.0.0.61", 0, "--num-gpu-blocks", "16384")
	p := startPicker(t, "--static-endpoints", s1.addr+","+s2.addr)
	p.WaitWorkers(t, 2)
	g := startGateway(t, p.Addr())
	// No request before the streams: each then holds a new buffer of
	// exactly perStream, none a smaller one kept from an earlier request.
	base := rssKiB(t, p.Pid())

	host := strings.TrimPrefix(g.URL, "http://")
	conns := make([]net.Conn, 0, streams)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range streams {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 16<<20); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, func() error {
		pp, err := p.Metrics()
		if err != nil {
			return err
		}
		if got := pp.Sum("inferpick_request_body_buffered_bytes"); got != streams*perStream {
			return fmt.Errorf("%v bytes buffered, want %d (every stream's first byte, %d each)", got, streams*perStream, perStream)
		}
		return nil
	})
	grew := rssKiB(t, p.Pid()) - base
	t.Logf("RSS %d MiB at baseline, +%d MiB with %d streams announcing 16 MiB each", base>>10, grew>>10, streams)
	if grew > 48<<10 {
		t.Errorf("RSS grew by %d MiB for %d streams that sent one byte each", grew>>10, streams)
	}

	big := completion(strings.Repeat("a long prompt ", 30000), 1, false) // ~400 KB
	if code, body, err := g.Complete(t.Context(), big); err != nil || code != http.StatusOK {
		t.Fatalf("a 400 KB request while the streams wait: %d %.200s %v", code, body, err)
	}

	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	eventually(t, 30*time.Second, func() error {
		pp, err := p.Metrics()
		if err != nil {
			return err
		}
		if got := pp.Sum("inferpick_request_body_buffered_bytes"); got != 0 {
			return fmt.Errorf("%v bytes still buffered after the clients left", got)
		}
		return nil
	})
	p.WaitIdle(t, 10*time.Second)
	checkReleases(t, p)
}

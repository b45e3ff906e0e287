package registry

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"
)

// benchEndpoints returns n endpoints on 10.0.0.0/8, port 8000.
func benchEndpoints(n int) []Endpoint {
	eps := make([]Endpoint, n)
	for i := range eps {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 8000)
		eps[i] = Endpoint{Key: Key{UID: "uid-" + strconv.Itoa(i), Port: 8000}, Namespace: "ns", Name: "pod-" + strconv.Itoa(i), Address: addr}
	}
	return eps
}

// BenchmarkPublish is one membership change in a pool of n workers: a
// worker leaves, and on the next iteration it comes back (as a new object),
// each publishing a new snapshot. ns/op is the cost of one publication.
func BenchmarkPublish(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			r := New()
			eps := benchEndpoints(n)
			r.Replace(eps)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				ep := eps[(i/2*7919)%n]
				if i%2 == 0 {
					remove(r, ep.Key)
				} else {
					upsert(r, ep)
				}
				i++
			}
			if len(r.Workers()) < n-1 {
				b.Fatalf("registry holds %d workers, want at least %d", len(r.Workers()), n-1)
			}
		})
	}
}

// BenchmarkReplaceOneChange is a whole-pool Replace in which one worker
// differs from the registry: what a controller that recomputes the pool on
// every pod event pays.
func BenchmarkReplaceOneChange(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			r := New()
			eps := benchEndpoints(n)
			r.Replace(eps)
			without := make([]Endpoint, 0, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i%2 == 0 {
					skip := (i / 2 * 7919) % n
					without = append(without[:0], eps[:skip]...)
					without = append(without, eps[skip+1:]...)
					r.Replace(without)
				} else {
					r.Replace(eps)
				}
				i++
			}
		})
	}
}

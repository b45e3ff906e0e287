package registry_test

import (
	"fmt"
	"net/netip"

	"github.com/inferpick/inferpick/picker/registry"
)

// A request holds a guard on the worker it was admitted on; the guard is
// released once, whatever path ends the request, and the count follows.
func Example() {
	reg := registry.New()
	reg.Replace([]registry.Endpoint{{
		Key:     registry.Key{UID: "pod-uid", Port: 8000},
		Name:    "vllm-0",
		Address: netip.MustParseAddrPort("10.0.0.1:8000"),
	}})
	w := reg.Workers()[0]

	g := w.Admit()
	p, d := w.Load()
	fmt.Println("admitted:", p, d)
	g.FirstToken()
	p, d = w.Load()
	fmt.Println("first token:", p, d)
	g.Release()
	g.Release() // a second release does nothing
	p, d = w.Load()
	fmt.Println("released:", p, d)
	// Output:
	// admitted: 1 0
	// first token: 0 1
	// released: 0 0
}

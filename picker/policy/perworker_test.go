package policy

import (
	"net/netip"
	"testing"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// A worker's value is made when it joins, is the same object for as long
// as the worker stays (parked too), and is dropped when it leaves: the
// table holds the registry's workers and nothing else, and a pod
// re-created at the same address starts from a zero value.
func TestPerWorkerFollowsTheRegistry(t *testing.T) {
	reg, ws := pool(2) // present before the table follows
	var tab perWorker[int]
	tab.follow(reg)
	for i, w := range ws {
		*tab.of(w) = i + 1
	}
	later := registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "later", Port: 8000}, Address: netip.MustParseAddrPort("127.0.0.9:8000")})
	if v := tab.of(later); v == nil || *v != 0 {
		t.Fatalf("a worker that joined later has %v, want a zero value of its own", v)
	}

	park := ws[1].Endpoint()
	park.Unready = true
	reg.Update([]registry.Endpoint{park}, nil)
	if v := tab.of(ws[1]); v == nil || *v != 2 {
		t.Errorf("a parked worker has %v, want the value it held (2)", v)
	}
	park.Unready = false
	reg.Update([]registry.Endpoint{park}, nil)
	if v := tab.of(ws[1]); v == nil || *v != 2 {
		t.Errorf("a worker back from parking has %v, want the value it held (2)", v)
	}

	registrytest.Remove(reg, ws[0].Endpoint().Key)
	if v := tab.of(ws[0]); v != nil {
		t.Errorf("a worker that left still has a value (%d)", *v)
	}
	again := ws[0].Endpoint()
	again.Key.UID += "-again"
	back := registrytest.Upsert(reg, again)
	if v := tab.of(back); v == nil || *v != 0 {
		t.Errorf("the pod re-created at %s has %v, want a zero value of its own", back.Address(), v)
	}
	if got, want := len(tab.all()), len(reg.AllWorkers()); got != want {
		t.Errorf("the table holds %d values for %d workers", got, want)
	}
}

package app

import (
	"net/netip"
	"testing"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// TestPoolSaturationCountsThePodsThatDecode: a pool of one decode pod at
// its in-flight cap and one pod labelled to prefill only is saturated, as
// no request can be decoded anywhere; the prefill pod, which never takes a
// request of its own, does not make it look half free.
func TestPoolSaturationCountsThePodsThatDecode(t *testing.T) {
	reg := registry.New()
	ep := func(i byte, role string) registry.Endpoint {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, i}), 8000)
		return registry.Endpoint{Key: registry.Key{UID: addr.String(), Port: 8000}, Name: addr.String(), Address: addr,
			Role: registry.ParseRole(role, true)}
	}
	reg.Replace([]registry.Endpoint{ep(1, "decode"), ep(2, "prefill")})
	reg.MarkSynced()
	g := reg.Decoders()[0].Admit()
	defer g.Release()
	cfg := policy.Config{MaxInFlight: 1}.Default()
	if got := poolSaturation(cfg, reg)(); got != 1 {
		t.Errorf("saturation %v with the one decode pod full, want 1", got)
	}
}

// TestPoolSaturationCountsThePodsTheLabelFiltersKeep: with the one pod the
// label filters keep at its in-flight cap, the pool is saturated, whatever
// room the pods they leave out have.
func TestPoolSaturationCountsThePodsTheLabelFiltersKeep(t *testing.T) {
	cfg := policy.Config{MaxInFlight: 1, LabelFilters: []policy.LabelFilter{{Label: "gpu", Values: []string{"h100"}}}}.Default()
	reg := registry.New()
	ep := func(i byte, gpu string) registry.Endpoint {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, i}), 8000)
		return registry.Endpoint{Key: registry.Key{UID: addr.String(), Port: 8000}, Name: addr.String(), Address: addr,
			Labels: registry.LabelsOf(cfg.LabelKeys(), map[string]string{"gpu": gpu})}
	}
	reg.Replace([]registry.Endpoint{ep(1, "h100"), ep(2, "l4"), ep(3, "l4")})
	reg.MarkSynced()
	g := reg.Workers()[0].Admit()
	defer g.Release()
	if got := poolSaturation(cfg, reg)(); got != 1 {
		t.Errorf("saturation %v with the one h100 pod full, want 1", got)
	}
}

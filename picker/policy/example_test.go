package policy_test

import (
	"fmt"
	"net/netip"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// The cache-aware policy sends a prompt it has routed before back to the
// worker that holds it.
func ExampleBuild() {
	reg := registry.New()
	reg.Replace([]registry.Endpoint{
		{Key: registry.Key{UID: "a", Port: 8000}, Name: "a", Address: netip.MustParseAddrPort("10.0.0.1:8000")},
		{Key: registry.Key{UID: "b", Port: 8000}, Name: "b", Address: netip.MustParseAddrPort("10.0.0.2:8000")},
	})
	pol, err := policy.Build(policy.Config{Name: policy.CacheAware}, reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	prompt := [][]byte{[]byte("You are a helpful assistant who answers in one short paragraph. "), []byte("Keep to the facts the user gives and say when you do not know.")}
	req := &policy.Request{Model: "llama", Prompt: prompt}
	first, _ := pol.Pick(req, reg.Workers(), 1)
	again, _ := pol.Pick(req, reg.Workers(), 1)
	fmt.Println(first[0] == again[0])
	// Output: true
}

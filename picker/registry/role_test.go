package registry

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRoleFollowsLlmdLabels(t *testing.T) {
	tests := []struct {
		value                      string
		labelled                   bool
		decodes, prefills, encodes bool
		name                       string
	}{
		{labelled: false, decodes: true, name: ""},
		{value: "decode", labelled: true, decodes: true, name: "decode"},
		{value: "prefill", labelled: true, prefills: true, name: "prefill"},
		{value: "encode-prefill", labelled: true, prefills: true, encodes: true, name: "encode-prefill"},
		{value: "prefill-decode", labelled: true, decodes: true, prefills: true, name: "prefill-decode"},
		{value: "both", labelled: true, decodes: true, prefills: true, name: "prefill-decode"},
		{value: "encode-prefill-decode", labelled: true, decodes: true, prefills: true, encodes: true, name: "encode-prefill-decode"},
		{value: "encode", labelled: true, encodes: true, name: "encode"},
		{value: "", labelled: true, name: "none"},
	}
	for _, tc := range tests {
		r := ParseRole(tc.value, tc.labelled)
		if r.Decodes() != tc.decodes || r.Prefills() != tc.prefills || r.Encodes() != tc.encodes || r.String() != tc.name {
			t.Errorf("ParseRole(%q, %v) decodes %v, prefills %v, encodes %v, named %q; want %v, %v, %v, %q",
				tc.value, tc.labelled, r.Decodes(), r.Prefills(), r.Encodes(), r.String(), tc.decodes, tc.prefills, tc.encodes, tc.name)
		}
	}
}

// roleEndpoint is the endpoint of pod uid at addr labelled with role, or
// with no role label when role is empty.
func roleEndpoint(uid, addr, role string) Endpoint {
	e := endpoint(uid, addr)
	e.Role = ParseRole(role, role != "")
	return e
}

// The role lists hold the live workers of each role, and follow a label
// edited on a running pod, whose worker stays with its load.
func TestRoleListsFollowTheLabels(t *testing.T) {
	r := New()
	r.Replace([]Endpoint{
		roleEndpoint("a", "10.0.0.1:8000", ""),
		roleEndpoint("b", "10.0.0.2:8000", "prefill"),
		roleEndpoint("c", "10.0.0.3:8000", "both"),
		roleEndpoint("d", "10.0.0.4:8000", "decode"),
	})
	check := func(when string, decoders, prefillers []string) {
		t.Helper()
		if diff := cmp.Diff(decoders, addresses(r.Decoders())); diff != "" {
			t.Errorf("%s: decoders (-want +got):\n%s", when, diff)
		}
		if diff := cmp.Diff(prefillers, addresses(r.Prefillers())); diff != "" {
			t.Errorf("%s: prefillers (-want +got):\n%s", when, diff)
		}
	}
	check("at start", []string{"10.0.0.1:8000", "10.0.0.3:8000", "10.0.0.4:8000"}, []string{"10.0.0.2:8000", "10.0.0.3:8000"})
	if d := r.Decoders(); &d[0] != &r.Decoders()[0] {
		t.Error("the decoders list was made again for the same snapshot")
	}

	w, _ := lookup(r, Key{UID: "d", Port: 8000})
	g := w.Admit()
	r.Update([]Endpoint{roleEndpoint("d", "10.0.0.4:8000", "prefill")}, nil)
	if now, _ := lookup(r, Key{UID: "d", Port: 8000}); now != w || now.Role().String() != "prefill" || now.InFlight() != 1 {
		t.Fatalf("after its label changed the worker is %p (was %p), role %q, %d in flight; want the same worker, prefill, 1",
			now, w, now.Role(), now.InFlight())
	}
	if got := w.Endpoint().Role.String(); got != "prefill" {
		t.Errorf("Endpoint().Role = %q, want prefill", got)
	}
	check("after d became a prefill pod", []string{"10.0.0.1:8000", "10.0.0.3:8000"}, []string{"10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"})
	g.Release()

	r.Update([]Endpoint{roleEndpoint("b", "10.0.0.2:8000", "")}, nil)
	check("after b lost its label", []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}, []string{"10.0.0.3:8000", "10.0.0.4:8000"})

	r.Replace([]Endpoint{roleEndpoint("a", "10.0.0.1:8000", ""), roleEndpoint("b", "10.0.0.2:8000", "")})
	if &r.Decoders()[0] != &r.Workers()[0] || len(r.Decoders()) != 2 || len(r.Prefillers()) != 0 {
		t.Errorf("with no role labels the decoders are not the workers list itself, or prefillers %v remain", addresses(r.Prefillers()))
	}
}

// The encoders are the live workers whose role names encode, and follow a
// label edited on a running pod; an encode-only pod decodes nothing.
func TestEncodersFollowTheLabels(t *testing.T) {
	r := New()
	r.Replace([]Endpoint{
		roleEndpoint("a", "10.0.0.1:8000", "encode"),
		roleEndpoint("b", "10.0.0.2:8000", "encode-prefill"),
		roleEndpoint("c", "10.0.0.3:8000", "encode-prefill-decode"),
		roleEndpoint("d", "10.0.0.4:8000", "decode"),
	})
	if diff := cmp.Diff([]string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}, addresses(r.Encoders())); diff != "" {
		t.Errorf("encoders (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"10.0.0.3:8000", "10.0.0.4:8000"}, addresses(r.Decoders())); diff != "" {
		t.Errorf("decoders (-want +got):\n%s", diff)
	}
	r.Update([]Endpoint{roleEndpoint("a", "10.0.0.1:8000", "decode"), roleEndpoint("d", "10.0.0.4:8000", "encode")}, nil)
	if diff := cmp.Diff([]string{"10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"}, addresses(r.Encoders())); diff != "" {
		t.Errorf("after a and d swapped roles, encoders (-want +got):\n%s", diff)
	}
	r.Replace(nil)
	if got := r.Encoders(); got == nil || len(got) != 0 {
		t.Errorf("with no workers, Encoders() = %#v, want an empty list", got)
	}
}

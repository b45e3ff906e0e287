package flowcontrol

import "testing"

func BenchmarkAdmitUncontended(b *testing.B) {
	q, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	it := Item{Priority: 1, FlowID: "tenant", Bytes: 1024}
	try := func() (bool, error) { return true, nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := q.Admit(ctx, it, try); err != nil {
			b.Fatal(err)
		}
	}
}

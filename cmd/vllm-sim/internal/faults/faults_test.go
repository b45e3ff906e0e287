package faults

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPatch(t *testing.T) {
	cases := map[string]struct {
		patch   string
		want    Config
		wantErr bool
	}{
		"empty object keeps everything": {patch: `{}`, want: None()},
		"partial patch": {
			patch: `{"error_rate":0.5,"error_status":503}`,
			want:  Config{ErrorRate: 0.5, ErrorStatus: 503, StallAfterChunks: Off, DropAfterChunks: Off, GRPCErrorAfterChunks: Off},
		},
		"stall at once": {
			patch: `{"stall_after_chunks":0,"metrics_garbage":true,"metrics_delay_ms":250}`,
			want:  Config{ErrorStatus: 500, StallAfterChunks: 0, DropAfterChunks: Off, GRPCErrorAfterChunks: Off, MetricsGarbage: true, MetricsDelayMs: 250},
		},
		"rate above one":   {patch: `{"error_rate":1.5}`, wantErr: true},
		"status not error": {patch: `{"error_status":200}`, wantErr: true},
		"unknown field":    {patch: `{"stall":3}`, wantErr: true},
		"trailing data":    {patch: `{} {}`, wantErr: true},
		"negative chunks":  {patch: `{"drop_after_chunks":-2}`, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := None().Patch([]byte(tc.patch))
			if (err != nil) != tc.wantErr {
				t.Fatalf("Patch error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRoll(t *testing.T) {
	cases := map[string]struct {
		rate       float64
		wantFailed int
	}{
		"never":  {rate: 0, wantFailed: 0},
		"always": {rate: 1, wantFailed: 100},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := None()
			cfg.ErrorRate, cfg.ErrorStatus = tc.rate, 503
			s := NewState(cfg, 1)
			failed := 0
			for range 100 {
				if _, status := s.Roll(); status != 0 {
					failed++
					if status != 503 {
						t.Fatalf("status = %d, want 503", status)
					}
				}
			}
			if failed != tc.wantFailed {
				t.Errorf("failed %d of 100, want %d", failed, tc.wantFailed)
			}
		})
	}
}

func TestRollIsReproducible(t *testing.T) {
	cfg := None()
	cfg.ErrorRate = 0.5
	run := func() []int {
		s := NewState(cfg, 42)
		var out []int
		for range 20 {
			_, status := s.Roll()
			out = append(out, status)
		}
		return out
	}
	if diff := cmp.Diff(run(), run()); diff != "" {
		t.Errorf("same seed, different rolls (-first +second):\n%s", diff)
	}
}

func FuzzPatch(f *testing.F) {
	f.Add([]byte(`{"error_rate":0.25,"error_status":503}`))
	f.Add([]byte(`{"stall_after_chunks":2,"drop_after_chunks":-1}`))
	f.Add([]byte(`{"metrics_delay_ms":10,"metrics_garbage":true}`))
	f.Add([]byte(`[1]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := None().Patch(data)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Patch accepted an invalid config %+v: %v", cfg, err)
		}
	})
}

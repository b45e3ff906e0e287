package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseConfig(t *testing.T) {
	type knobs struct {
		ControlPlane string
		Requests     int
		Keep         bool
		Policy       string
	}
	cases := map[string]struct {
		args    []string
		env     map[string]string
		want    knobs
		wantErr string
	}{
		"environment, as make passes it": {
			env:  map[string]string{"KUBEBUILDER_ASSETS": "/cp", "KEEP": "1", "DEMO_REQUESTS": "40", "DEMO_POLICY": "round-robin"},
			want: knobs{ControlPlane: "/cp", Requests: 40, Keep: true, Policy: "round-robin"},
		},
		"flags win over the environment": {
			args: []string{"--controlplane", "/flag", "--requests", "7", "--keep=false"},
			env:  map[string]string{"KUBEBUILDER_ASSETS": "/cp", "KEEP": "true", "DEMO_REQUESTS": "40"},
			want: knobs{ControlPlane: "/flag", Requests: 7},
		},
		"KEEP=0 does not keep": {
			env:  map[string]string{"KUBEBUILDER_ASSETS": "/cp", "KEEP": "0"},
			want: knobs{ControlPlane: "/cp", Requests: defaultWorkload().Requests},
		},
		"no control plane":        {wantErr: "no control plane"},
		"bad DEMO_REQUESTS":       {env: map[string]string{"KUBEBUILDER_ASSETS": "/cp", "DEMO_REQUESTS": "many"}, wantErr: "DEMO_REQUESTS"},
		"abort rate out of range": {args: []string{"--abort-rate", "2"}, env: map[string]string{"KUBEBUILDER_ASSETS": "/cp"}, wantErr: "abort rate"},
		"unknown flag":            {args: []string{"--nope"}, env: map[string]string{"KUBEBUILDER_ASSETS": "/cp"}, wantErr: "nope"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := parseConfig(tc.args, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseConfig = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := knobs{ControlPlane: c.ControlPlaneDir, Requests: c.Workload.Requests, Keep: c.Keep, Policy: c.Policy}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodIPsCountUpFromTheFirst(t *testing.T) {
	c := defaultConfig()
	var got []string
	for _, ip := range c.podIPs() {
		got = append(got, ip.String())
	}
	want := []string{"127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod IPs (-want +got):\n%s", diff)
	}
}

func TestProgressLine(t *testing.T) {
	got := progressLine(tallySnapshot{Total: 40, InFlight: 4, Done: 20, Aborted: 2, Failed: 1}, 12345e6)
	want := "[###############...............] 20/40 done, 4 in flight, 2 aborted, 1 failed, 12.3s"
	if got != want {
		t.Errorf("progressLine = %q, want %q", got, want)
	}
}

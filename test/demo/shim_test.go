package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestShimOf(t *testing.T) {
	dir := t.TempDir()
	paths, err := prepareShims(dir, "/opt/k8s")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		argv0    string
		want     string
		wantShim bool
	}{
		"etcd link":           {argv0: paths["etcd"], want: "/opt/k8s/etcd", wantShim: true},
		"kube-apiserver link": {argv0: paths["kube-apiserver"], want: "/opt/k8s/kube-apiserver", wantShim: true},
		"the demo itself":     {argv0: filepath.Join(dir, "inferpick-demo")},
		"etcd elsewhere":      {argv0: filepath.Join(t.TempDir(), "etcd")},
		"bare name":           {argv0: "etcd"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := shimOf(tc.argv0)
			if got != tc.want || ok != tc.wantShim {
				t.Errorf("shimOf(%q) = %q, %t; want %q, %t", tc.argv0, got, ok, tc.want, tc.wantShim)
			}
		})
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(paths["etcd"]); err != nil || target != self {
		t.Errorf("etcd link points at %q (%v), want %q", target, err, self)
	}
}

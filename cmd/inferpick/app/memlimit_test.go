package app

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/go-logr/logr"
)

// TestSetMemoryLimit: the runtime's soft limit is 90% of the container's,
// and GOMEMLIMIT, when set, is left to rule.
func TestSetMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "memory.max"), []byte("1000000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOMEMLIMIT", "")
	setMemoryLimit(logr.Discard(), root)
	if got := debug.SetMemoryLimit(-1); got != 900_000_000 {
		t.Errorf("soft limit %d under a 1 GB container, want 900000000", got)
	}
	debug.SetMemoryLimit(prev)
	t.Setenv("GOMEMLIMIT", "500MiB")
	setMemoryLimit(logr.Discard(), root)
	if got := debug.SetMemoryLimit(-1); got != prev {
		t.Errorf("soft limit %d with GOMEMLIMIT set, want it left at %d", got, prev)
	}
}

func TestCgroupMemoryLimit(t *testing.T) {
	cases := map[string]struct {
		files map[string]string
		want  int64 // 0: none
	}{
		"v2 limit":     {files: map[string]string{"memory.max": "1073741824\n"}, want: 1 << 30},
		"v2 unlimited": {files: map[string]string{"memory.max": "max\n"}},
		"v1 limit":     {files: map[string]string{"memory/memory.limit_in_bytes": "536870912\n"}, want: 512 << 20},
		"v1 unlimited": {files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}},
		"v2 first":     {files: map[string]string{"memory.max": "2147483648", "memory/memory.limit_in_bytes": "536870912"}, want: 2 << 30},
		"no cgroup":    {},
		"garbled":      {files: map[string]string{"memory.max": "lots"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			for f, content := range tc.files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, _, ok := cgroupMemoryLimit(root)
			if ok != (tc.want != 0) || got != tc.want {
				t.Errorf("limit %d (found %v), want %d", got, ok, tc.want)
			}
		})
	}
}

func FuzzParseMemoryLimit(f *testing.F) {
	for _, s := range []string{"max\n", "1073741824\n", "9223372036854771712", "-1", " 42 ", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := parseMemoryLimit(b)
		if !ok {
			return
		}
		if n <= 0 || n >= noLimit {
			t.Fatalf("limit %d accepted from %q", n, b)
		}
		if again, ok := parseMemoryLimit([]byte(strconv.FormatInt(n, 10))); !ok || again != n {
			t.Fatalf("%d read back as %d, %v", n, again, ok)
		}
	})
}

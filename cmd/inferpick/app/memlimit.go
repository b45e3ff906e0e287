package app

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"

	"github.com/go-logr/logr"
)

// memoryLimitShare is the share of the container's memory limit given to
// the Go runtime as its soft limit: the rest is for what the runtime does
// not count (thread stacks outside the heap, the kernel's buffers of the
// picker's sockets) and for the collector to act before the kernel's OOM
// killer would.
const memoryLimitShare = 0.9

// setMemoryLimit gives the Go runtime a soft memory limit of 90% of the
// container's cgroup memory limit, read under root (/sys/fs/cgroup), so
// that the collector works harder as the heap nears the limit instead of
// letting it reach twice the live heap. GOMEMLIMIT, when set, is left as it
// is; so is a container without a limit.
func setMemoryLimit(log logr.Logger, root string) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.V(1).Info("Go memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return
	}
	limit, file, ok := cgroupMemoryLimit(root)
	if !ok {
		return
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	log.Info("Go memory limit set from the container's", "limitBytes", limit, "cgroupFile", file, "softLimitBytes", soft)
}

// cgroupMemoryLimit returns the memory limit of the cgroup mounted at
// root: memory.max under cgroup v2, memory/memory.limit_in_bytes under
// v1. ok is false when neither is readable or there is no limit.
func cgroupMemoryLimit(root string) (limit int64, file string, ok bool) {
	for _, name := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		file = filepath.Join(root, name)
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		limit, ok = parseMemoryLimit(b)
		return limit, file, ok
	}
	return 0, "", false
}

// noLimit is where cgroup v1 reports an unlimited group (the largest
// int64 rounded down to a page), and anything above it is no limit either.
const noLimit = 1 << 62

// parseMemoryLimit reads a cgroup memory limit file: a byte count, or
// "max" for none.
func parseMemoryLimit(b []byte) (int64, bool) {
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n <= 0 || n >= noLimit {
		return 0, false
	}
	return n, true
}

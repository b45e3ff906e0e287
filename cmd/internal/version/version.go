// Package version names the build of inferpick's commands. The image and
// release builds set Version and Revision with
// -ldflags "-X github.com/inferpick/inferpick/cmd/internal/version.Version=..."
// (and .Revision); a plain go build falls back to the module's VCS stamp.
package version

import (
	"fmt"
	"runtime/debug"
)

// Set by the linker.
var (
	Version  = ""
	Revision = ""
)

// String is the line a command prints for --version: its name, version and
// source revision.
func String(command string) string {
	v, r := Get()
	return fmt.Sprintf("%s %s (revision %s)", command, v, r)
}

// Get returns the version and the source revision: those set by the linker,
// else what the Go build recorded, else "(devel)" and "unknown".
func Get() (version, revision string) {
	v, r := Version, Revision
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && r == "" {
				r = s.Value
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if r == "" {
		r = "unknown"
	}
	return v, r
}

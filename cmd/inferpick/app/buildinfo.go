package app

import "runtime/debug"

// buildInfo returns the VCS revision the binary was built from and its
// module version ("(devel)" for a build from a work tree).
func buildInfo() (commit, ref string) {
	commit, ref = "unknown", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return commit, ref
	}
	ref = bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			commit = s.Value
		}
	}
	return commit, ref
}

package app

import "github.com/inferpick/inferpick/cmd/internal/version"

// buildInfo returns the source revision and the version, the labels of the
// build info series.
func buildInfo() (commit, ref string) {
	v, r := version.Get()
	return r, v
}

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every image and local link in the committed report names a file of the
// repository: a section spliced in from a run written elsewhere (-out,
// -plots) must point at the plots committed with it, not at that run's
// directory.
func TestReportLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	links := regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(string(doc), -1)
	if len(links) == 0 {
		t.Fatal("BENCHMARKS.md has no links; the pattern no longer matches them")
	}
	for _, m := range links {
		target, _, _ := strings.Cut(m[1], "#")
		if target == "" || strings.Contains(target, "://") {
			continue
		}
		if filepath.IsAbs(target) {
			t.Errorf("BENCHMARKS.md links to %s, outside the repository", m[1])
			continue
		}
		if _, err := os.Stat(filepath.Join(root, target)); err != nil {
			t.Errorf("BENCHMARKS.md links to %s: %v", m[1], err)
		}
	}
}

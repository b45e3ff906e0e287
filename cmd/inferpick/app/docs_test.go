package app

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// flagNames matches the flags named in a table cell: `--pool-name`, `-v`.
var flagNames = regexp.MustCompile("`(--?[a-z][a-z0-9-]*)`")

// TestReadmeListsEveryFlag: the README's flag table names every flag of the
// binary and no flag it lacks. The flags accepted only so that upstream's
// arguments still parse are listed in docs/operations.md instead, and
// klog's own (--vmodule, --log_dir, ...) are left to klog's documentation.
func TestReadmeListsEveryFlag(t *testing.T) {
	fs := flag.NewFlagSet("inferpick", flag.ContinueOnError)
	if _, err := Parse(fs, []string{"--static-endpoints", "127.0.0.1:8000"}); err != nil {
		t.Fatal(err)
	}
	klogs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogs)

	readme := flagTable(t, "../../../README.md")
	operations := read(t, "../../../docs/operations.md")
	inertNames := make([]string, 0, len(inertFlags))
	for _, f := range inertFlags {
		inertNames = append(inertNames, f.name)
	}
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case slices.Contains(inertNames, f.Name):
			if !strings.Contains(operations, "`--"+f.Name+"`") {
				t.Errorf("--%s is accepted for compatibility but docs/operations.md does not say so", f.Name)
			}
		case f.Name != "v" && klogs.Lookup(f.Name) != nil:
		case !readme[f.Name]:
			t.Errorf("--%s (%s) is not in the README's flag table", f.Name, f.Usage)
		}
	})
	for name := range readme {
		if fs.Lookup(name) == nil {
			t.Errorf("the README's flag table lists --%s, which inferpick does not have", name)
		}
	}
}

// flagTable returns the flags named in the first column of the table under
// the README's "## Flags" heading.
func flagTable(t *testing.T, path string) map[string]bool {
	t.Helper()
	_, section, ok := strings.Cut(read(t, path), "\n## Flags\n")
	if !ok {
		t.Fatalf("%s has no \"## Flags\" section", path)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	names := map[string]bool{}
	for line := range strings.Lines(section) {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		for _, m := range flagNames.FindAllStringSubmatch(cells[1], -1) {
			names[strings.TrimLeft(m[1], "-")] = true
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: the flag table names no flag", path)
	}
	return names
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestZapHelpStatesTheLoggersDefaults: each --zap-* flag's help names, as
// its default, what the logger does when the flag is not given.
func TestZapHelpStatesTheLoggersDefaults(t *testing.T) {
	lines := func(t *testing.T, args ...string) (*flag.FlagSet, []string) {
		t.Helper()
		fs := flag.NewFlagSet("inferpick", flag.ContinueOnError)
		o, err := Parse(fs, append([]string{"--static-endpoints", "127.0.0.1:8000"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		o.logging.zap.DestWriter = &buf
		log := zap.New(zap.UseFlagOptions(&o.logging.zap))
		log.V(1).Info("debug")
		log.Info("info")
		log.Error(nil, "error")
		return fs, strings.Split(strings.TrimSpace(buf.String()), "\n")
	}
	fs, def := lines(t)
	_, devel := lines(t, "--zap-devel")
	encoder := "console"
	if strings.HasPrefix(def[0], "{") {
		encoder = "json"
	}
	timeEncoding := "not rfc3339"
	if stamp, _, _ := strings.Cut(def[0], "\t"); stamp != "" {
		if _, err := time.Parse(time.RFC3339, stamp); err == nil {
			timeEncoding = "rfc3339"
		}
	}
	stacktraceLevel := "not error"
	if len(def) > 2 && strings.Contains(def[len(def)-1], ".go:") && !strings.Contains(def[0], ".go:") {
		stacktraceLevel = "error"
	}
	develDebug := "the level still follows -v"
	if strings.Contains(strings.Join(devel, "\n"), "debug") {
		develDebug = "writes debug lines at -v 0"
	}
	for _, tc := range []struct{ name, want string }{
		{"zap-encoder", encoder + " (the default)"},
		{"zap-time-encoding", timeEncoding + " (the default)"},
		{"zap-stacktrace-level", stacktraceLevel + " (the default"},
		{"zap-devel", develDebug},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if usage := fs.Lookup(tc.name).Usage; !strings.Contains(usage, tc.want) {
				t.Errorf("--%s help %q does not say %q", tc.name, usage, tc.want)
			}
		})
	}
}

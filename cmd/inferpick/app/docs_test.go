package app

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// TestReadmeStatesEveryDefault: the default column of the README's flag
// table gives each flag's default as the binary has it: its value, spelled
// as in the table (16 MiB for 16777216), or, for a flag whose empty value
// stands for something else, words (in-cluster, the preset's) or the value
// its help names as the default.
func TestReadmeStatesEveryDefault(t *testing.T) {
	fs := flag.NewFlagSet("inferpick", flag.ContinueOnError)
	if _, err := Parse(fs, []string{"--static-endpoints", "127.0.0.1:8000"}); err != nil {
		t.Fatal(err)
	}
	for row, cell := range flagDefaults(t, "../../../README.md") {
		names := strings.Fields(row)
		defaults := []string{cell}
		if len(names) > 1 && strings.Contains(cell, ", ") {
			defaults = strings.Split(cell, ", ")
		}
		for i, name := range names {
			f := fs.Lookup(name)
			if f == nil {
				continue // TestReadmeListsEveryFlag reports it
			}
			doc := defaults[min(i, len(defaults)-1)]
			if len(defaults) != 1 && len(defaults) != len(names) {
				t.Errorf("the README's row of %s gives %d defaults for %d flags", strings.Join(names, ", "), len(defaults), len(names))
				break
			}
			if !sameDefault(doc, f) {
				t.Errorf("the README gives --%s the default %q; the binary's is %q (help: %s)", name, doc, f.DefValue, f.Usage)
			}
		}
	}
}

// flagDefaults returns the default cell of each row of the README's flag
// table, keyed by the row's flags joined by spaces, with its parenthesized
// remarks left out.
func flagDefaults(t *testing.T, path string) map[string]string {
	t.Helper()
	_, section, _ := strings.Cut(read(t, path), "\n## Flags\n")
	section, _, _ = strings.Cut(section, "\n## ")
	remark := regexp.MustCompile(` \([^()]*(\([^()]*\)[^()]*)*\)`)
	rows := map[string]string{}
	for line := range strings.Lines(section) {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		var names []string
		for _, m := range flagNames.FindAllStringSubmatch(cells[1], -1) {
			names = append(names, strings.TrimLeft(m[1], "-"))
		}
		rows[strings.Join(names, " ")] = strings.TrimSpace(remark.ReplaceAllString(cells[2], ""))
	}
	return rows
}

var (
	docSize         = regexp.MustCompile(`^(\d+) (KiB|MiB|GiB)$`)
	startsWithDigit = regexp.MustCompile(`^\d`)
)

// sameDefault reports whether doc, a default as the README's table gives
// it, is f's default.
func sameDefault(doc string, f *flag.Flag) bool {
	literal := strings.Trim(doc, "`")
	if strings.Contains(literal, "`") {
		literal = "" // words around code: not one value
	}
	switch {
	case literal == f.DefValue:
		return true
	case doc == "":
		return f.DefValue == "false"
	}
	if d, err := time.ParseDuration(literal); err == nil {
		got, err := time.ParseDuration(f.DefValue)
		return err == nil && d == got
	}
	if m := docSize.FindStringSubmatch(literal); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return strconv.FormatInt(n<<map[string]int{"KiB": 10, "MiB": 20, "GiB": 30}[m[2]], 10) == f.DefValue
	}
	if f.DefValue != "" && f.DefValue != "0" {
		return false
	}
	// The empty value stands for a default: words say which (in-cluster,
	// the preset's); a value must be the one the help names.
	if strings.Count(doc, "`") == 2 && strings.HasPrefix(doc, "`") || startsWithDigit.MatchString(doc) {
		return strings.Contains(f.Usage, literal+" (")
	}
	return true
}

// TestKlogHelpSaysWhatTakesEffect: klog's flags write nothing of their own
// (no files, no headers, no stderr of their own), as every line goes to the
// process logger; their help says so, and --vmodule's that the logger's
// level still filters its lines.
func TestKlogHelpSaysWhatTakesEffect(t *testing.T) {
	fs := flag.NewFlagSet("inferpick", flag.ContinueOnError)
	dir := t.TempDir()
	o, err := Parse(fs, []string{"--static-endpoints", "127.0.0.1:8000", "--vmodule=docs_test=3", "--logtostderr=false", "--log_dir=" + dir})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	o.logging.zap.DestWriter = &buf
	klog.SetLogger(zap.New(zap.UseFlagOptions(&o.logging.zap)))
	t.Cleanup(klog.ClearLogger)
	klog.V(3).Info("a V(3) line --vmodule enables")
	klog.Info("a V(0) line")
	klog.Flush()
	if diff := cmp.Diff(1, strings.Count(buf.String(), "\n")); diff != "" {
		t.Errorf("lines written to the logger (-want +got):\n%s\n%s", diff, buf.String())
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Errorf("--log_dir got %d files", len(files))
	}
	o.logging.klog.VisitAll(func(k *flag.Flag) {
		if k.Name == "v" || k.Name == "log_backtrace_at" {
			return
		}
		want := "No effect"
		if k.Name == "vmodule" {
			want = "only up to --zap-log-level's level"
		}
		if usage := fs.Lookup(k.Name).Usage; !strings.Contains(usage, want) {
			t.Errorf("--%s help %q does not say %q", k.Name, usage, want)
		}
	})
}

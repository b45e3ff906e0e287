package app

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// FuzzParseArgs: any command line either parses with every argument read
// or is refused; nothing is left over unread and nothing panics.
func FuzzParseArgs(f *testing.F) {
	for _, seed := range []string{
		"--disable-endpoint-subset-filter\ntrue\n--v\n3\n--tracing=false",
		"--metrics-endpoint-auth\nfalse\n--grpc-port\n9100",
		"--pool-group\n--secure-serving\n--zap-devel\nT",
		"--\n--v\n3",
		"-v=2\nstray",
		"-v3\n--v\n-v12",
		"--secure-serving=maybe",
		"-\n--=x\n---v",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		fs := flag.NewFlagSet("inferpick", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		NewOptions().AddFlags(fs)
		_, err := parseArgs(fs, strings.Split(line, "\n"))
		if err == nil && fs.NArg() > 0 {
			t.Fatalf("parsed with %q left unread", fs.Args())
		}
	})
}

package app

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// parseArgs parses the whole command line on fs. Go's flag package stops at
// the first argument that is not a flag; the upstream endpoint picker's
// (pflag) goes on past it, and its chart renders each entry of
// inferenceExtension.flags as two arguments, `--key` then `"value"`, so a
// boolean comes as `--disable-endpoint-subset-filter true`. Here a boolean
// flag directly followed by a value strconv.ParseBool reads (true, False,
// 0, ...) takes that value; any other argument that is not a flag is an
// error naming it, instead of the rest of the line being dropped. pflag
// also takes -v's level attached to it (-v3, the shorthand of --v), which
// is read here as -v=3.
//
// It returns the boolean flags turned off by a value apart from them
// (--secure-serving false): upstream's pflag leaves that value as a
// stray argument and turns those flags on.
func parseArgs(fs *flag.FlagSet, args []string) (offApart []string, err error) {
	joined := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if level, ok := strings.CutPrefix(a, "-v"); ok && level != "" && isDigits(level) {
			a = "-v=" + level
		}
		joined = append(joined, a)
		if a == "--" || len(a) < 2 || a[0] != '-' {
			// The end of the flags, or a stray argument: fs.Parse stops
			// there and what follows is reported below.
			joined = append(joined, args[i+1:]...)
			break
		}
		name := strings.TrimPrefix(a[1:], "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // fs.Parse reports it
		}
		if !isBoolFlag(f) {
			i++ // its value, whatever it looks like, as fs.Parse takes it
			if i < len(args) {
				joined = append(joined, args[i])
			}
			continue
		}
		if i+1 < len(args) {
			if on, err := strconv.ParseBool(args[i+1]); err == nil {
				i++
				joined[len(joined)-1] = a + "=" + args[i]
				if !on {
					offApart = append(offApart, f.Name)
				}
			}
		}
	}
	if err := fs.Parse(joined); err != nil {
		return nil, err
	}
	if rest := fs.Args(); len(rest) > 0 {
		return nil, fmt.Errorf("unexpected argument %q: only flags are read (a boolean flag takes --flag=value, or true or false after it)", rest[0])
	}
	return offApart, nil
}

// upstreamReadsOn is the warning for a boolean flag turned off by a value
// apart from it, which the upstream picker reads as on.
func upstreamReadsOn(name string) Warning {
	return Warning{Flag: "--" + name, Value: "false", Message: upstreamMessage,
		Reason: fmt.Sprintf("given as two arguments (--%[1]s false), as the inferencepool chart renders inferenceExtension.flags: "+
			"the upstream picker skips the false and turns --%[1]s on; here it is off, as written (--%[1]s=false says so without this warning)", name)}
}

// isBoolFlag reports whether f may be given without a value.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// isDigits reports whether s is made of ASCII digits only.
func isDigits(s string) bool {
	return strings.Trim(s, "0123456789") == ""
}

package app

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/go-logr/logr"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// logging holds the zap flags (controller-runtime's --zap-*), the
// verbosity -v and klog's other flags.
type logging struct {
	zap zap.Options
	// levelSet is whether --zap-log-level was given; without it the level
	// follows -v: -v=N logs V(N) and below.
	levelSet bool
	verbose  int
	klog     *flag.FlagSet
}

func (l *logging) addFlags(fs *flag.FlagSet) {
	// Console lines unless --zap-encoder=json (or --zap-devel) says
	// otherwise.
	l.zap.NewEncoder = consoleEncoder
	l.zap.BindFlags(fs)
	// controller-runtime's usage texts describe its own defaults (JSON
	// lines, epoch times, debug level in development mode), not these.
	for name, usage := range map[string]string{
		"zap-encoder":          "Log encoding: console (the default) or json.",
		"zap-time-encoding":    "Time encoding of log lines: rfc3339 (the default), rfc3339nano, iso8601, epoch, millis or nano.",
		"zap-stacktrace-level": "Level at and above which log lines carry a stack trace: info, error (the default; warn under --zap-devel) or panic.",
		"zap-devel":            "Development mode: stack traces from warn lines up, unless --zap-stacktrace-level says otherwise, and a DPanic line panics; the level still follows -v or --zap-log-level.",
		"zap-log-level":        "Log level, overriding -v: debug, info, error, panic, or a number n (V(n) lines and below).",
	} {
		fs.Lookup(name).Usage = usage
	}
	fs.IntVar(&l.verbose, "v", l.verbose, "Log verbosity: V(n) lines are written for n up to this; --zap-log-level, when given, decides instead.")
	// klog's flags but -v, which complete passes on to klog, stay
	// accepted (--vmodule for client-go's lines).
	l.klog = flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(l.klog)
	// klog hands every line to the process logger, so its file, stderr and
	// header flags do nothing, and a line --vmodule lets through is still
	// filtered by the logger's level.
	l.klog.VisitAll(func(f *flag.Flag) {
		if f.Name == "v" || fs.Lookup(f.Name) != nil {
			return
		}
		usage := "No effect (klog's, accepted): every line, client-go's too, goes to the one logger the --zap-* flags and -v set up."
		switch f.Name {
		case "vmodule":
			usage = "Comma-separated pattern=N: client-go's V(n) lines, n up to N, of the source files matching pattern; they are written only up to --zap-log-level's level, so give that too."
		case "log_backtrace_at":
			usage = f.Usage
		}
		fs.Var(f.Value, f.Name, usage)
	})
}

// complete applies -v when --zap-log-level was not given.
func (l *logging) complete(fs *flag.FlagSet) error {
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "zap-log-level" {
			l.levelSet = true
		}
	})
	v := min(max(l.verbose, 0), 127)
	if err := l.klog.Set("v", strconv.Itoa(v)); err != nil {
		return fmt.Errorf("-v: %w", err)
	}
	if !l.levelSet {
		l.zap.Level = uberzap.NewAtomicLevelAt(zapcore.Level(-v))
	}
	return nil
}

// logger builds the process logger from the flags and sends klog's output
// (client-go's among it) to it.
func (l *logging) logger() logr.Logger {
	log := zap.New(zap.UseFlagOptions(&l.zap))
	klog.SetLogger(log)
	return log
}

func consoleEncoder(opts ...zap.EncoderConfigOption) zapcore.Encoder {
	cfg := uberzap.NewProductionEncoderConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return zapcore.NewConsoleEncoder(cfg)
}

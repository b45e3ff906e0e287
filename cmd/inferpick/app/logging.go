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

// logging holds the zap flags (controller-runtime's --zap-*) and the
// verbosity -v shared with klog.
type logging struct {
	zap zap.Options
	// levelSet is whether --zap-log-level was given; without it the level
	// follows -v: -v=N logs V(N) and below.
	levelSet bool
	verbose  *flag.Flag
}

func (l *logging) addFlags(fs *flag.FlagSet) {
	// Console lines unless --zap-encoder=json (or --zap-devel) says
	// otherwise.
	l.zap.NewEncoder = consoleEncoder
	l.zap.BindFlags(fs)
	klog.InitFlags(fs)
	l.verbose = fs.Lookup("v")
}

// complete applies -v when --zap-log-level was not given.
func (l *logging) complete(fs *flag.FlagSet) error {
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "zap-log-level" {
			l.levelSet = true
		}
	})
	if l.levelSet {
		return nil
	}
	v := 0
	if l.verbose != nil {
		n, err := strconv.Atoi(l.verbose.Value.String())
		if err != nil {
			return fmt.Errorf("-v: %w", err)
		}
		v = n
	}
	lvl := uberzap.NewAtomicLevelAt(zapcore.Level(-min(max(v, 0), 127)))
	l.zap.Level = lvl
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

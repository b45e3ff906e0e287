package framework

import (
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// LogLines holds what a logger wrote, a line per entry, for a test to read
// while the logger is still in use.
type LogLines struct {
	mu    sync.Mutex
	lines []string
}

// Logger returns a logger that writes to l.
func (l *LogLines) Logger() logr.Logger { return funcr.New(l.add, funcr.Options{}) }

func (l *LogLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

// String returns the lines written so far, joined by newlines.
func (l *LogLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

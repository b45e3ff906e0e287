package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// StopGrace is how long Stop waits after SIGTERM before it kills.
const StopGrace = 20 * time.Second

// Cmd describes a child process.
type Cmd struct {
	// Name names the process in errors and logs.
	Name string
	// Path is the binary; Args its arguments.
	Path string
	Args []string
	// Env is added to this process's environment.
	Env []string
	// Log is the file the child's stdout and stderr go to. StartT picks one
	// in the test's temporary directory when it is empty.
	Log string
}

// Process is a started child, in its own process group so that stopping it
// stops what it started too. On Linux the kernel ends it when this process
// dies.
type Process struct {
	name string
	log  string
	cmd  *exec.Cmd
	file *os.File
	done chan struct{}
	err  error // valid once done is closed
}

// Start runs c with its output in c.Log.
func Start(c Cmd) (*Process, error) {
	if c.Log == "" {
		return nil, fmt.Errorf("start %s: no log file", c.Name)
	}
	f, err := os.OpenFile(c.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: log: %w", c.Name, err)
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", c.Name, err)
	}
	p := &Process{name: c.Name, log: c.Log, cmd: cmd, file: f, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// StartT starts c for the test: the test's cleanup stops it (an error when
// it needs SIGKILL) and prints the end of its log when the test failed.
func StartT(t testing.TB, c Cmd) *Process {
	t.Helper()
	if c.Log == "" {
		c.Log = filepath.Join(t.TempDir(), strings.NewReplacer("/", "_", " ", "_", ":", "_").Replace(c.Name)+".log")
	}
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(StopGrace); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("%s", p.Output())
		}
	})
	return p
}

// Name is the name the process was started with.
func (p *Process) Name() string { return p.name }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath is the file holding the process's output.
func (p *Process) LogPath() string { return p.log }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the process ended: nil while it runs or after a clean exit.
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Stop sends SIGTERM to the process group, waits up to grace, then kills
// the group. It returns an error when the process had to be killed; it is
// safe to call more than once.
func (p *Process) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	signalGroup(p.cmd.Process.Pid, false)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	signalGroup(p.cmd.Process.Pid, true)
	<-p.done
	return fmt.Errorf("%s did not stop within %s of SIGTERM and was killed", p.name, grace)
}

// Kill ends the process group with SIGKILL and waits for the process.
func (p *Process) Kill() {
	if !p.Exited() {
		signalGroup(p.cmd.Process.Pid, true)
	}
	<-p.done
}

// outputTail is how much of the log Output returns.
const outputTail = 16 << 10

// Output returns the end of the process's log, headed by its name and path.
func (p *Process) Output() string {
	return fmt.Sprintf("--- %s log (%s) ---\n%s", p.name, p.log, p.tail(outputTail))
}

// Log returns everything the process wrote so far.
func (p *Process) Log() string { return p.tail(-1) }

func (p *Process) tail(n int64) string {
	f, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = f.Close() }()
	if st, err := f.Stat(); err == nil && n >= 0 && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// WaitFor waits until the log holds text and returns the rest of the line
// after it. It fails early when the process exits first.
func (p *Process) WaitFor(ctx context.Context, timeout time.Duration, text string) (string, error) {
	var rest string
	err := Poll(ctx, timeout, func() error {
		b, err := os.ReadFile(p.log)
		if err != nil {
			return err
		}
		if i := bytes.Index(b, []byte(text)); i >= 0 {
			line, _, _ := bytes.Cut(b[i+len(text):], []byte("\n"))
			rest = strings.TrimSpace(string(line))
			return nil
		}
		if p.Exited() {
			exit := p.err
			if exit == nil {
				exit = errors.New("exit status 0")
			}
			return Stop(fmt.Errorf("%s exited before it said %q (%w); see %s", p.name, text, exit, p.log))
		}
		return fmt.Errorf("%s has not said %q; see %s", p.name, text, p.log)
	})
	return rest, err
}

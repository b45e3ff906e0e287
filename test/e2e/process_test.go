package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// process is a binary the suite runs. Its output goes to a log file that is
// printed when the spec fails.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// stopGrace is how long a process gets after SIGTERM before it is killed.
const stopGrace = 15 * time.Second

// start runs bin with args and env added to the suite's environment. The
// process is stopped at the end of the current spec or container unless
// stopped earlier.
func start(name, bin string, env []string, args ...string) *process {
	GinkgoHelper()
	p := &process{name: name, log: filepath.Join(suite.tmp, name+".log"), done: make(chan struct{})}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	Expect(err).NotTo(HaveOccurred())
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Its own process group, so an interrupted test run does not leave it
	// attached to the terminal's signals.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	Expect(p.cmd.Start()).To(Succeed(), "start %s", name)
	go func() {
		p.err = p.cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Println(p.output())
		}
		p.stop()
	})
	return p
}

// stop sends SIGTERM, waits for the exit, and kills the process if it does
// not exit within stopGrace. It is safe to call more than once.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
		Fail(fmt.Sprintf("%s did not stop within %s of SIGTERM\n%s", p.name, stopGrace, p.output()))
	}
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// output returns the tail of the process's log.
func (p *process) output() string {
	f, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = f.Close() }()
	const tail = 16 << 10
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		_, _ = f.Seek(st.Size()-tail, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return fmt.Sprintf("--- %s log (%s) ---\n%s", p.name, p.log, b)
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() int {
	GinkgoHelper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = lis.Close() }()
	return lis.Addr().(*net.TCPAddr).Port
}

// modelServer is a vllm-sim process standing in for one Pod's container.
type modelServer struct {
	*process
	addr string
}

// startModelServer runs vllm-sim on ip:port without simulated delays and
// waits until it answers /health.
func startModelServer(ctx context.Context, ip string, port int) *modelServer {
	GinkgoHelper()
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	p := start("vllm-sim-"+addr, suite.vllmSim, nil,
		"--host", ip, "--port", strconv.Itoa(port), "--time-scale", "0")
	Eventually(func() error {
		if done, err := p.exited(); done {
			return StopTrying(fmt.Sprintf("vllm-sim on %s exited: %v\n%s", addr, err, p.output()))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", http.NoBody)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	return &modelServer{process: p, addr: addr}
}

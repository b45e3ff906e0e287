package e2e

import (
	"context"
	"fmt"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/inferpick/inferpick/test/framework"
)

// process is a binary the suite runs (test/framework's). Its output goes to
// a log file that is printed when the spec fails.
type process struct {
	*framework.Process
}

// stopGrace is how long a process gets after SIGTERM before it is killed.
const stopGrace = framework.StopGrace

// start runs bin with args and env added to the suite's environment. The
// process is stopped at the end of the current spec or container unless
// stopped earlier.
func start(name, bin string, env []string, args ...string) *process {
	GinkgoHelper()
	fp, err := framework.Start(framework.Cmd{Name: name, Path: bin, Args: args, Env: env,
		Log: filepath.Join(suite.tmp, name+".log")})
	Expect(err).NotTo(HaveOccurred())
	p := &process{fp}
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
	if err := p.Stop(stopGrace); err != nil {
		Fail(fmt.Sprintf("%v\n%s", err, p.output()))
	}
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) { return p.Exited(), p.Err() }

// output returns the tail of the process's log.
func (p *process) output() string { return p.Output() }

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() int {
	GinkgoHelper()
	port, err := framework.FreePort("127.0.0.1")
	Expect(err).NotTo(HaveOccurred())
	return port
}

// modelServer is a vllm-sim process standing in for one Pod's container.
type modelServer struct {
	*process
	addr string
}

// startModelServer runs vllm-sim on ip:port without simulated delays and
// waits until it listens.
func startModelServer(ctx context.Context, ip string, port int) *modelServer {
	GinkgoHelper()
	s, err := framework.StartSim(ctx, suite.vllmSim, ip, port,
		filepath.Join(suite.tmp, fmt.Sprintf("vllm-sim-%s-%d.log", ip, port)), "--time-scale", "0")
	Expect(err).NotTo(HaveOccurred())
	p := &process{s.Process}
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Println(p.output())
		}
		p.stop()
	})
	return &modelServer{process: p, addr: s.Addr}
}

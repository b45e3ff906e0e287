package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/inferpick/inferpick/test/framework"
)

// chartArgs reads an args file of testdata: one argument per line, # for
// comments. The chart mounts its ConfigMap at /config; configDir stands in.
func chartArgs(t *testing.T, name, configDir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		args = append(args, strings.Replace(line, "/config/", configDir+"/", 1))
	}
	return args
}

// syncBuffer is the child's stderr, read while it is written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// inferpickBinary builds the binary once for the package's tests.
func inferpickBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "inferpick-bin"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "inferpick")
		build := exec.Command("go", "build", "-o", binPath, "github.com/inferpick/inferpick/cmd/inferpick")
		build.Env = append(os.Environ(), "GOTOOLCHAIN=local")
		if out, err := build.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// process is a running inferpick binary.
type process struct {
	cmd    *exec.Cmd
	args   []string
	stderr *syncBuffer
	exited chan error
}

// startBinary starts inferpick with args and waits until it reports ready
// on the gRPC health service readiness at healthPort. It fails the test if
// the process exits first.
func startBinary(t *testing.T, healthPort int, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(inferpickBinary(t), args...), args: args, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.stderr, p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })

	health := healthpb.NewHealthClient(dial(t, healthPort))
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-p.exited:
			t.Fatalf("inferpick exited (%v) with %q:\n%s", err, args, p.stderr)
		default:
		}
		r, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "readiness"})
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready on readiness:\n%s", p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("still running a minute after SIGTERM:\n%s", p.stderr)
	}
}

// TestChartArgsStartTheBinary starts the inferpick binary with the exact
// args the upstream inferencepool chart and llm-d's router chart render. No
// cluster is reachable, so --static-endpoints is added for the picker to
// have endpoints and become ready, and the ports are moved to free loopback
// ones. It must keep running, report ready, log its lines as JSON
// (--zap-encoder json) and warn once for each flag that has no effect.
func TestChartArgsStartTheBinary(t *testing.T) {
	cases := map[string]struct {
		args, config string
		warned       []string
	}{
		"gateway-api-inference-extension v1.5.0 inferencepool chart": {
			args: "gie-v1.5.0-args.txt", config: "gie-v1.5.0-default-plugins.yaml",
			warned: []string{"--pool-name"},
		},
		// Its flags map renders a boolean as two arguments: every flag
		// after it (the ports added below among them) still counts, and
		// "false" turns the flag off.
		"inferencepool chart with booleans in inferenceExtension.flags": {
			args: "gie-v1.5.0-flags-args.txt", config: "gie-v1.5.0-default-plugins.yaml",
			warned: []string{"--enable-cert-reload", "--pool-name"},
		},
		"llm-d router chart with llm-d's sample config without P/D": {
			args: "llm-d-router-args.txt", config: "llm-d-v0.8.0-epp-config.yaml",
			warned: []string{"--pool-name"},
		},
		"llm-d router chart with llm-d's precise prefix-cache sample config": {
			args: "llm-d-router-args.txt", config: "llm-d-v0.8.0-precise-prefix-cache-config.yaml",
			// tokenizer, tokenProcessorConfig and the scorers' weights
			warned: []string{"--config-file", "--config-file", "--config-file", "--pool-name"},
		},
		"llm-d router chart": {
			args: "llm-d-router-args.txt", config: "llm-d-router-default-plugins.yaml",
			warned: []string{"--pool-name"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfgDir := t.TempDir()
			cfg, err := os.ReadFile(filepath.Join("testdata", tc.config))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cfgDir, "default-plugins.yaml"), cfg, 0o600); err != nil {
				t.Fatal(err)
			}
			healthPort := framework.FreePortT(t)
			args := append(chartArgs(t, tc.args, cfgDir),
				"--static-endpoints", "127.0.0.1:1",
				"--bind-address", "127.0.0.1",
				"--grpc-port", fmt.Sprint(framework.FreePortT(t)),
				"--grpc-health-port", fmt.Sprint(healthPort),
				"--metrics-port", fmt.Sprint(framework.FreePortT(t)))
			p := startBinary(t, healthPort, args...)
			p.stop(t)
			if diff := cmp.Diff(tc.warned, warnedFlags(t, p.stderr.String())); diff != "" {
				t.Errorf("flags warned about (-want +got):\n%s\nlog:\n%s", diff, p.stderr)
			}
		})
	}
}

// warnedFlags returns the flags of the no-effect warnings in a JSON log,
// sorted; a line that is not JSON fails the test.
func warnedFlags(t *testing.T, log string) []string {
	t.Helper()
	var flags []string
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var line struct {
			Msg  string `json:"msg"`
			Flag string `json:"flag"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Errorf("log line is not JSON: %q", sc.Text())
			continue
		}
		if line.Msg == warningMessage {
			// A configuration's warnings name the flag and its file.
			name, _, _ := strings.Cut(line.Flag, " ")
			flags = append(flags, name)
		}
	}
	slices.Sort(flags)
	return flags
}

package app

import (
	"bufio"
	"context"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferpick/inferpick/cmd/vllm-sim/vllmgrpc"
)

// startRun runs o until ctx ends; Run writes its announcements into the
// returned reader and its result into done.
func startRun(ctx context.Context, o *Options) (pr *io.PipeReader, done <-chan error) {
	pr, pw := io.Pipe()
	result := make(chan error, 1)
	go func() {
		err := Run(ctx, o, pw)
		pw.Close()
		result <- err
	}()
	return pr, result
}

func TestRunAnnouncesServesAndStops(t *testing.T) {
	o := NewOptions()
	fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--host", "127.0.0.7", "--port", "0", "--model", "m", "--time-scale", "0"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, done := startRun(ctx, o)
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the announcement: %v", err)
	}
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "vllm-sim listening on ")
	if !ok || !strings.HasPrefix(base, "http://127.0.0.7:") || strings.HasSuffix(base, ":0") {
		t.Fatalf("announcement %q, want the real address on 127.0.0.7", line)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d, want 200", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after stop: %v", err)
	}
}

func TestRunServesTheGRPCAPIBesideHTTP(t *testing.T) {
	o := NewOptions()
	fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--host", "127.0.0.7", "--port", "0", "--grpc-port", "0", "--model", "m", "--time-scale", "0"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, done := startRun(ctx, o)
	br := bufio.NewReader(pr)
	var lines []string
	for range 2 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the announcements: %v", err)
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	addr, ok := strings.CutPrefix(lines[0], "vllm-sim gRPC listening on ")
	if !ok || !strings.HasPrefix(addr, "127.0.0.7:") || strings.HasSuffix(addr, ":0") || !strings.HasPrefix(lines[1], "vllm-sim listening on http://") {
		t.Fatalf("announcements %q, want the gRPC address on 127.0.0.7, then the HTTP one", lines)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	info, err := vllmgrpc.NewClient(conn).GetModelInfo(ctx)
	if err != nil || info.ModelPath != "m" {
		t.Errorf("GetModelInfo: %+v, %v; want model_path m", info, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after stop: %v", err)
	}
}

func TestValidate(t *testing.T) {
	cases := map[string]struct {
		args    []string
		wantErr bool
	}{
		"defaults":               {},
		"bad host":               {args: []string{"--host", "example.com"}, wantErr: true},
		"zero blocks":            {args: []string{"--num-gpu-blocks", "0"}, wantErr: true},
		"negative scale":         {args: []string{"--time-scale", "-1"}, wantErr: true},
		"bad fault rate":         {args: []string{"--fault-error-rate", "2"}, wantErr: true},
		"faults on":              {args: []string{"--fault-stall-after-chunks", "3", "--fault-error-status", "503"}},
		"empty model":            {args: []string{"--model", ""}, wantErr: true},
		"lora modules":           {args: []string{"--served-model-name", "llama,alias", "--lora-modules", "sql=/a/sql chat=/a/chat", "--lora-modules", `{"name":"x","path":"/a/x","base_model_name":"alias"}`, "--max-loras", "2"}},
		"lora base not served":   {args: []string{"--lora-modules", `{"name":"x","path":"/a/x","base_model_name":"qwen"}`}, wantErr: true},
		"cpu loras below max":    {args: []string{"--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2"}, wantErr: true},
		"no lora slots":          {args: []string{"--enable-lora", "--max-loras", "0"}, wantErr: true},
		"a node's engines":       {args: []string{"--data-parallel-size", "8", "--data-parallel-size-local", "4", "--data-parallel-start-rank", "4"}},
		"the last node's rest":   {args: []string{"--data-parallel-size", "8", "--data-parallel-start-rank", "6"}},
		"ranks past the size":    {args: []string{"--data-parallel-size", "8", "--data-parallel-size-local", "4", "--data-parallel-start-rank", "6"}, wantErr: true},
		"start past the size":    {args: []string{"--data-parallel-size", "2", "--data-parallel-start-rank", "2"}, wantErr: true},
		"negative start rank":    {args: []string{"--data-parallel-start-rank", "-1"}, wantErr: true},
		"too many engines":       {args: []string{"--data-parallel-size", "65"}, wantErr: true},
		"events when scheduled":  {args: []string{"--kv-events-when", "scheduled"}},
		"events at another time": {args: []string{"--kv-events-when", "later"}, wantErr: true},
		"an offloading tier":     {args: []string{"--kv-offloading-blocks", "4096", "--kv-offloading-load-us-per-token", "2.5"}},
		"negative tier":          {args: []string{"--kv-offloading-blocks", "-1"}, wantErr: true},
		"negative load cost":     {args: []string{"--kv-offloading-load-us-per-token", "-1"}, wantErr: true},
		"a hybrid model":         {args: []string{"--hybrid-sliding-window", "128"}},
		"prefill pods":           {args: []string{"--kv-transfer-us-per-block", "40", "--prefill-timeout", "5s"}},
		"negative transfer cost": {args: []string{"--kv-transfer-us-per-block", "-1"}, wantErr: true},
		"no prefill time":        {args: []string{"--prefill-timeout", "0s"}, wantErr: true},
		"negative window":        {args: []string{"--hybrid-sliding-window", "-128"}, wantErr: true},
		"a gRPC port":            {args: []string{"--grpc-port", "50051"}},
		"gRPC port out of range": {args: []string{"--grpc-port", "65536"}, wantErr: true},
		"gRPC port below -1":     {args: []string{"--grpc-port", "-2"}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := o.Validate(); (err != nil) != tc.wantErr {
				t.Errorf("Validate() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

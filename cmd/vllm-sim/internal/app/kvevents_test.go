package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/kvcache"
	"github.com/inferpick/inferpick/picker/kvevents"
)

func TestParseKVEventsConfig(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    KVEventsConfig
		wantErr bool
	}{
		"vLLM's example": {in: `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv@a","replay_endpoint":"tcp://*:5558","buffer_steps":100,"hwm":1000}`,
			want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://*:5557", Topic: "kv@a"}},
		"defaults":          {in: `{"enable_kv_cache_events":true}`, want: KVEventsConfig{Enabled: true, Publisher: "zmq", Endpoint: "tcp://*:5557"}},
		"off":               {in: `{"enable_kv_cache_events":false,"publisher":"nats"}`, want: KVEventsConfig{Publisher: "nats", Endpoint: "tcp://*:5557"}},
		"null publisher":    {in: `{"enable_kv_cache_events":true,"publisher":"null"}`, want: KVEventsConfig{Publisher: "null", Endpoint: "tcp://*:5557"}},
		"unknown publisher": {in: `{"enable_kv_cache_events":true,"publisher":"nats"}`, wantErr: true},
		"ipc endpoint":      {in: `{"enable_kv_cache_events":true,"endpoint":"ipc:///tmp/kv"}`, wantErr: true},
		"no port":           {in: `{"enable_kv_cache_events":true,"endpoint":"tcp://*"}`, wantErr: true},
		"not JSON":          {in: `enable`, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.AddFlags(fs)
			err := fs.Parse([]string{"--kv-events-config", tc.in})
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if err == nil {
				if diff := cmp.Diff(tc.want, o.KVEvents); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}

// simWithEvents runs the simulator with KV-cache events on a free port and
// returns its HTTP base URL and a subscriber's channel of batches.
func simWithEvents(t *testing.T, args ...string) (base string, batches <-chan kvevents.Batch) {
	t.Helper()
	o := NewOptions()
	fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
	o.AddFlags(fs)
	args = append([]string{"--host", "127.0.0.8", "--port", "0", "--model", "m", "--time-scale", "0",
		"--kv-events-config", `{"enable_kv_cache_events":true,"endpoint":"tcp://*:0","topic":"kv@m"}`}, args...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Run(ctx, o, pw)
		pw.Close()
	}()
	t.Cleanup(func() { cancel(); <-done })
	r := bufio.NewReader(pr)
	var events string
	for base == "" {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the announcements: %v", err)
		}
		if a, ok := strings.CutPrefix(strings.TrimSpace(line), "vllm-sim KV events on tcp://"); ok {
			events = a
		}
		if a, ok := strings.CutPrefix(strings.TrimSpace(line), "vllm-sim listening on "); ok {
			base = a
		}
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	if events == "" {
		t.Fatal("no KV events address announced before the HTTP one")
	}
	sub, err := kvevents.DialSub(ctx, events, []byte("kv@"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	ch := make(chan kvevents.Batch, 100)
	go func() {
		var parts [][]byte
		next := uint64(0)
		for {
			parts, err = sub.Recv(parts)
			if err != nil {
				return
			}
			if len(parts) != 3 || string(parts[0]) != "kv@m" || len(parts[1]) != 8 {
				t.Errorf("message of %d parts, topic %q", len(parts), parts[0])
				return
			}
			if seq := binary.BigEndian.Uint64(parts[1]); next != 0 && seq != next {
				t.Errorf("sequence %d after %d", seq, next-1)
			} else {
				next = seq + 1
			}
			var b kvevents.Batch
			if err := kvevents.DecodeBatch(parts[2], &b); err != nil {
				t.Errorf("batch: %v", err)
				return
			}
			ch <- b
		}
	}()
	// The subscription reaches the publisher after DialSub returns: send
	// distinct prompts until one's events arrive.
	for i := 0; ; i++ {
		post(t, base+"/v1/completions", fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":1}`, strings.Repeat(fmt.Sprint(i), 64)))
		select {
		case <-ch:
			return base, ch
		case <-time.After(100 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal("no events")
		}
	}
}

func post(t *testing.T, url, body string) []byte {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s %v", url, resp.StatusCode, b, err)
	}
	return b
}

// nextStored returns the stored events of the next batch.
func nextStored(t *testing.T, ch <-chan kvevents.Batch) []kvevents.Event {
	t.Helper()
	select {
	case b := <-ch:
		return b.Events
	case <-time.After(10 * time.Second):
		t.Fatal("no batch within 10 s")
	}
	return nil
}

// text decodes the simulator's token ids back to text.
func text(ids []uint32) string {
	var b bytes.Buffer
	for _, id := range ids {
		b.Write(binary.LittleEndian.AppendUint32(nil, id))
	}
	return b.String()
}

func TestKVEventsFollowTheCache(t *testing.T) {
	base, ch := simWithEvents(t, "--block-size", "4", "--num-gpu-blocks", "64")
	system := strings.Repeat("You are a careful assistant. ", 4) // 116 bytes
	chat := func(q string) string {
		return fmt.Sprintf(`{"model":"m","max_tokens":1,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, system, q)
	}
	rendered := "<|system|>\n" + system + "\n<|user|>\nfirst question\n<|assistant|>\n"
	blockBytes := 4 * kvcache.BytesPerToken

	// The first chat stores every full block of its prompt, in one chained run.
	post(t, base+"/v1/chat/completions", chat("first question"))
	evs := nextStored(t, ch)
	if len(evs) != 1 || evs[0].Kind != kvevents.BlockStored || evs[0].HasParent {
		t.Fatalf("events %+v, want one BlockStored without parent", evs)
	}
	first := evs[0]
	full := len(rendered) / blockBytes
	if len(first.Hashes) != full || first.BlockSize != 4 || first.Medium != "GPU" {
		t.Errorf("%d hashes of block size %d in %q, want %d of 4 in GPU", len(first.Hashes), first.BlockSize, first.Medium, full)
	}
	if got := text(first.TokenIDs); got != rendered[:full*blockBytes] {
		t.Errorf("token ids read back %q, want %q", got, rendered[:full*blockBytes])
	}

	// /tokenize gives the same ids for the same chat.
	var tok struct {
		Count  int      `json:"count"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(post(t, base+"/tokenize", chat("first question")), &tok); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first.TokenIDs, tok.Tokens[:full*4]); diff != "" || tok.Count != len(tok.Tokens) {
		t.Errorf("count %d of %d; /tokenize's full blocks (-events +tokenize):\n%s", tok.Count, len(tok.Tokens), diff)
	}

	// A second chat with the same system prompt stores only what follows the
	// shared blocks, chained to the last of them.
	post(t, base+"/v1/chat/completions", chat("second question, longer than the first"))
	evs = nextStored(t, ch)
	shared := len("<|system|>\n"+system+"\n<|user|>\n") / blockBytes
	if len(evs) != 1 || !evs[0].HasParent || evs[0].Parent != first.Hashes[shared-1] {
		t.Fatalf("events %+v, want one BlockStored chained to block %d (%x)", evs, shared-1, first.Hashes[shared-1])
	}
	rendered2 := "<|system|>\n" + system + "\n<|user|>\nsecond question, longer than the first\n<|assistant|>\n"
	if got, want := text(evs[0].TokenIDs), rendered2[shared*blockBytes:len(rendered2)/blockBytes*blockBytes]; got != want {
		t.Errorf("the second chat's stored tokens read back %q, want %q", got, want)
	}

	// Filling the cache with other prompts evicts the first chat's blocks.
	removed := map[uint64]bool{}
	for i := 0; len(removed) < len(first.Hashes); i++ {
		if i == 40 {
			t.Fatalf("after %d more prompts only %d of the first chat's %d blocks were removed", i, len(removed), len(first.Hashes))
		}
		post(t, base+"/v1/completions", fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":1}`, strings.Repeat(string(rune('a'+i%26)), 100+i)))
		for _, ev := range nextStored(t, ch) {
			if ev.Kind == kvevents.BlockRemoved {
				for _, h := range ev.Hashes {
					removed[h] = true
				}
			}
		}
		removed = keep(removed, first.Hashes)
	}
}

// keep returns the keys of m that are in hs.
func keep(m map[uint64]bool, hs []uint64) map[uint64]bool {
	out := map[uint64]bool{}
	for _, h := range hs {
		if m[h] {
			out[h] = true
		}
	}
	return out
}

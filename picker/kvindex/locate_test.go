package kvindex

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inferpick/inferpick/picker/kvevents"
	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// tokenizer is a model server's /tokenize on a loopback port: it answers
// tokens, or 500 while broken, and counts the calls it took.
type tokenizer struct {
	tokens []uint32
	broken atomic.Bool
	calls  atomic.Int64
	addr   netip.AddrPort
}

func startTokenizer(t *testing.T, tokens []uint32) *tokenizer {
	t.Helper()
	tk := &tokenizer{tokens: tokens}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tk.calls.Add(1)
		if r.URL.Path != "/tokenize" || tk.broken.Load() {
			http.Error(w, "tokenizer unavailable", http.StatusInternalServerError)
			return
		}
		b := []byte(`{"count":` + strconv.Itoa(len(tk.tokens)) + `,"tokens":[`)
		for i, id := range tk.tokens {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(id), 10)
		}
		_, _ = w.Write(append(b, "]}"...))
	}))
	t.Cleanup(srv.Close)
	tk.addr = netip.MustParseAddrPort(srv.Listener.Addr().(*net.TCPAddr).String())
	return tk
}

func chat(t *testing.T) *openai.Request {
	t.Helper()
	var r openai.Request
	if err := openai.Parse(openai.ChatCompletions, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// locateChat parses a chat body and looks its prompt up with l: whether it
// was looked up, and where it is held.
func locateChat(t *testing.T, l *Locator, body string) (bool, []policy.SharedHold) {
	t.Helper()
	var r openai.Request
	if err := openai.Parse(openai.ChatCompletions, []byte(body), &r); err != nil {
		t.Fatal(err)
	}
	var sh policy.Shared
	found, err := l.Locate(context.Background(), "m", &r, &sh)
	if err != nil {
		t.Fatal(err)
	}
	return found, sh.Holds
}

// TestLocatorLeavesOutAFailingServer checks the circuit breaker: a server
// whose /tokenize fails three times in a row is not asked again for a
// second, then once; a success forgets its failures; with every server
// resting, prompts are routed without a lookup and counted as skipped.
func TestLocatorLeavesOutAFailingServer(t *testing.T) {
	tokens := prompt(1, 4, -1)
	good, bad := startTokenizer(t, tokens), startTokenizer(t, tokens)
	bad.broken.Store(true)
	reg := registry.New()
	wGood := registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "good", Port: 1}, Name: "good", Address: good.addr})
	registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "bad", Port: 1}, Name: "bad", Address: bad.addr})
	ix := New(0)
	ix.Apply(wGood.ID(), []kvevents.Event{stored(1, tokens, 0, 4, "")})
	now := time.Unix(1000, 0)
	l := NewLocator(ix, reg, time.Second)
	l.now = func() time.Time { return now }

	locate := func() bool {
		var sh policy.Shared
		found, _ := l.Locate(context.Background(), "m", chat(t), &sh)
		if found && (len(sh.Holds) != 1 || sh.Holds[0].Worker != wGood.ID() || sh.Holds[0].Share != 1) {
			t.Fatalf("holds %+v, want the good server holding the whole prompt", sh.Holds)
		}
		return found
	}
	for range 12 {
		locate()
	}
	if got := bad.calls.Load(); got != breakAfter {
		t.Errorf("the failing server took %d calls of 12, want %d before it is left out", got, breakAfter)
	}
	if got := good.calls.Load(); got != 12-breakAfter {
		t.Errorf("the good server took %d calls, want the other %d", got, 12-breakAfter)
	}

	// A second later the failing server is tried once more; failing again,
	// it rests two seconds.
	now = now.Add(minPause)
	for range 4 {
		locate()
	}
	if got := bad.calls.Load(); got != breakAfter+1 {
		t.Errorf("after its pause the failing server took %d calls in all, want %d", got, breakAfter+1)
	}
	now = now.Add(minPause)
	locate()
	locate()
	if got := bad.calls.Load(); got != breakAfter+1 {
		t.Errorf("one second into its doubled pause the failing server took %d calls in all, want %d", got, breakAfter+1)
	}

	// Mended, it is asked again after the pause and its failures forgotten.
	bad.broken.Store(false)
	now = now.Add(minPause)
	for range 4 {
		if !locate() {
			t.Error("a lookup failed with both servers answering")
		}
	}
	if got := bad.calls.Load(); got != breakAfter+3 {
		t.Errorf("the mended server took %d calls in all, want %d", got, breakAfter+3)
	}

	// Both broken: once both rest, no call is made and lookups are skipped.
	good.broken.Store(true)
	bad.broken.Store(true)
	for range 12 {
		if locate() {
			t.Fatal("a lookup succeeded with both servers failing")
		}
	}
	calls, failed, skipped := l.Calls()
	if failed != breakAfter+1+2*breakAfter || skipped != 12-2*breakAfter {
		t.Errorf("calls %d, failed %d, skipped %d: want %d failed and %d skipped", calls, failed, skipped, breakAfter+1+2*breakAfter, 12-2*breakAfter)
	}
}

// twoTokenizingWorkers returns a registry of two workers whose /tokenize
// answers tokens.
func twoTokenizingWorkers(t *testing.T, tokens []uint32) (reg *registry.Registry, w1, w2 *registry.Worker) {
	t.Helper()
	tk := startTokenizer(t, tokens)
	reg = registry.New()
	w1 = registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "a", Port: 1}, Name: "a", Address: tk.addr})
	w2 = registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "b", Port: 1}, Name: "b", Address: tk.addr})
	return reg, w1, w2
}

// TestLocatorLooksUpSaltedPrompts: a salted prompt is looked up only once
// the servers' events have shown that they key blocks by salt; then it is
// found where it was stored under its salt (escapes in the request's JSON
// undone), and not under another.
func TestLocatorLooksUpSaltedPrompts(t *testing.T) {
	tokens := prompt(1, 4, -1)
	reg, w1, w2 := twoTokenizingWorkers(t, tokens)
	ix := New(0)
	ix.Apply(w1.ID(), []kvevents.Event{stored(1, tokens, 0, 4, "")})
	l := NewLocator(ix, reg, time.Second)
	locate := func(salt string) (bool, []policy.SharedHold) {
		t.Helper()
		return locateChat(t, l, `{"model":"m","cache_salt":`+salt+`,"messages":[{"role":"user","content":"hi"}]}`)
	}
	if found, _ := locate(`"tenant-a"`); found {
		t.Error("a salted prompt was looked up before the servers keyed any block by salt")
	}
	salted := stored(2, tokens, 0, 4, "")
	salted.Extra = []kvevents.ExtraKeys{kvevents.SaltKeys(`tenant "a"`)}
	ix.Apply(w2.ID(), []kvevents.Event{salted})
	found, holds := locate(`"tenant \"a\""`)
	if want := []policy.SharedHold{{Worker: w2.ID(), Share: 1}}; !found || !cmp.Equal(holds, want) {
		t.Errorf("salted lookup: found %v, holds %+v; want %+v", found, holds, want)
	}
	if found, holds := locate(`"tenant-b"`); !found || len(holds) != 0 {
		t.Errorf("another salt: found %v, holds %+v; want a lookup finding none", found, holds)
	}
}

// TestLocatorLooksUpPromptsWithMediaOnlyOnServersThatKeyThem: a server
// mixes each image's hash into its blocks' hashes, and /tokenize gives two
// images of one size the same placeholder tokens. A prompt with an image
// is looked up only once the servers' events have shown that they key
// blocks by their extra keys (as salted prompts are); before, the pod
// holding another image's blocks would be found holding it all.
func TestLocatorLooksUpPromptsWithMediaOnlyOnServersThatKeyThem(t *testing.T) {
	tokens := prompt(1, 4, -1) // the text and the image's placeholder tokens
	reg, w1, _ := twoTokenizingWorkers(t, tokens)
	ix := New(0)
	ix.Apply(w1.ID(), []kvevents.Event{stored(1, tokens, 0, 4, "")}) // with image A, no extra_keys
	l := NewLocator(ix, reg, time.Second)
	locate := func() (bool, []policy.SharedHold) {
		t.Helper()
		return locateChat(t, l, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},`+
			`{"type":"image_url","image_url":{"url":"https://example.com/B.png"}}]}]}`)
	}
	wantLookedUpOnceMediaKeyed(t, ix, w1.ID(), tokens, "a prompt", locate)
}

// TestLocatorCountsOffloadedBlocksAtTheirWeight: a prompt whose last blocks
// a server keeps only in its offloading tier counts them at the locator's
// OffloadWeight.
func TestLocatorCountsOffloadedBlocksAtTheirWeight(t *testing.T) {
	tokens := prompt(1, 4, -1)
	reg, w1, w2 := twoTokenizingWorkers(t, tokens)
	ix := New(0)
	ix.Apply(w1.ID(), []kvevents.Event{stored(1, tokens, 0, 4, "")})
	onW2 := stored(2, tokens, 0, 4, "")
	ix.Apply(w2.ID(), []kvevents.Event{onW2,
		{Kind: kvevents.BlockStored, Hashes: onW2.Hashes, Medium: "CPU"},
		{Kind: kvevents.BlockRemoved, Hashes: onW2.Hashes[2:], Medium: "GPU"}})
	l := NewLocator(ix, reg, time.Second)
	l.OffloadWeight = 0.5
	var r openai.Request
	if err := openai.Parse(openai.ChatCompletions, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), &r); err != nil {
		t.Fatal(err)
	}
	var sh policy.Shared
	if found, err := l.Locate(context.Background(), "m", &r, &sh); err != nil || !found {
		t.Fatalf("found %v, %v", found, err)
	}
	want := []policy.SharedHold{{Worker: w1.ID(), Share: 1}, {Worker: w2.ID(), Share: 0.75}}
	got := sh.Holds
	sort.Slice(got, func(i, j int) bool { return got[i].Worker < got[j].Worker })
	if !cmp.Equal(got, want) {
		t.Errorf("holds %+v, want %+v (two of w2's four blocks offloaded, at half a block each)", got, want)
	}
}

// In a pool of two models, a prompt is tokenized only on pods whose model
// list names its model: another model's pod would answer 404, which would
// count against that healthy pod and leave its own model without one.
func TestLocatorAsksOnlyPodsThatServeTheModel(t *testing.T) {
	tokens := prompt(1, 4, -1)
	reg := registry.New()
	var ws []*registry.Worker
	var tks []*tokenizer
	for _, model := range []string{"m", "other"} {
		tk := startTokenizer(t, tokens)
		w := registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: model, Port: 1}, Name: model, Address: tk.addr})
		w.SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{model}, Complete: true}})
		ws, tks = append(ws, w), append(tks, tk)
	}
	ix := New(0)
	ix.Apply(ws[0].ID(), []kvevents.Event{stored(1, tokens, 0, 4, "")})
	l := NewLocator(ix, reg, 0)
	for i := range 10 {
		var sh policy.Shared
		if ok, err := l.Locate(context.Background(), "m", chat(t), &sh); !ok || err != nil {
			t.Fatalf("lookup %d of model m: found %v, %v", i, ok, err)
		}
	}
	if n := tks[1].calls.Load(); n != 0 {
		t.Errorf("the other model's pod was asked to tokenize model m's prompt %d times", n)
	}
	// A pod whose list is not known yet, or not complete, may be asked.
	ws[1].SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"other"}}})
	for range 4 {
		var sh policy.Shared
		if _, err := l.Locate(context.Background(), "m", chat(t), &sh); err != nil {
			t.Fatal(err)
		}
	}
	if tks[1].calls.Load() == 0 {
		t.Error("a pod with an incomplete model list was never asked")
	}
}

// A LoRA adapter's prompt is looked up under the adapter's name from its
// first request: the servers key its blocks apart from the base model's, so
// a pod holding the same tokens for the base model saves it nothing.
func TestLocatorLooksUpAnAdapterUnderItsName(t *testing.T) {
	tokens := prompt(1, 4, -1)
	tk := startTokenizer(t, tokens)
	reg := registry.New()
	w := registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "a", Port: 1}, Name: "a", Address: tk.addr})
	w.SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"llama"},
		Adapters: []registry.Adapter{{Name: "sql-lora", Parent: "llama"}}, Complete: true}})
	ix := New(0)
	ix.Apply(w.ID(), []kvevents.Event{stored(1, tokens, 0, 4, "")}) // the base model's blocks
	l := NewLocator(ix, reg, 0)
	holds := func(model string) int {
		var sh policy.Shared
		if _, err := l.Locate(context.Background(), model, chat(t), &sh); err != nil {
			t.Fatal(err)
		}
		return len(sh.Holds)
	}
	if n := holds("llama"); n != 1 {
		t.Errorf("base model: %d pods hold the prompt, want 1", n)
	}
	if n := holds("sql-lora"); n != 0 {
		t.Errorf("adapter with none of its own blocks stored: %d pods hold the prompt, want none", n)
	}
	ix.Apply(w.ID(), []kvevents.Event{stored(2, tokens, 0, 4, "sql-lora")})
	if n := holds("sql-lora"); n != 1 {
		t.Errorf("adapter with its blocks stored: %d pods hold the prompt, want 1", n)
	}
}

// TestLocatorLooksUpAGRPCRequestByItsTokenIDs: a gRPC Generate that sends
// its token ids is looked up by them, with no /tokenize call (the API
// names no model to tokenize for), and found where the servers stored
// them.
func TestLocatorLooksUpAGRPCRequestByItsTokenIDs(t *testing.T) {
	tokens := prompt(1, 4, -1)
	tk := startTokenizer(t, prompt(500, 4, -1)) // what /tokenize would say is another prompt
	reg := registry.New()
	w1 := registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "a", Port: 1}, Name: "a", Address: tk.addr})
	w2 := registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "b", Port: 1}, Name: "b", Address: tk.addr})
	ix := New(0)
	ix.Apply(w1.ID(), []kvevents.Event{stored(1, tokens, 0, 4, "")})
	ix.Apply(w2.ID(), []kvevents.Event{stored(2, tokens, 0, 2, "")})
	l := NewLocator(ix, reg, time.Second)

	var packed []byte
	for _, id := range tokens {
		packed = protowire.AppendVarint(packed, uint64(id))
	}
	tokenized := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("the text"))
	tokenized = protowire.AppendBytes(protowire.AppendTag(tokenized, 2, protowire.BytesType), packed)
	msg := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), tokenized)
	body := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	if len(msg) > 255 {
		t.Fatalf("the test's message is %d bytes, over its one-byte length", len(msg))
	}
	var r openai.Request
	if err := openai.ParseGRPC(openai.GRPCGenerate, body, &r); err != nil {
		t.Fatal(err)
	}
	var sh policy.Shared
	found, err := l.Locate(context.Background(), "", &r, &sh)
	if err != nil || !found {
		t.Fatalf("found %v, %v; want the ids looked up", found, err)
	}
	got := sh.Holds
	sort.Slice(got, func(i, j int) bool { return got[i].Worker < got[j].Worker })
	if want := []policy.SharedHold{{Worker: w1.ID(), Share: 1}, {Worker: w2.ID(), Share: 0.5}}; !cmp.Equal(got, want) {
		t.Errorf("holds %+v, want %+v", got, want)
	}
	if n := tk.calls.Load(); n != 0 {
		t.Errorf("%d /tokenize calls, want none", n)
	}
}

// TestLocatorLooksUpAGRPCRequestWithImagesOnlyOnServersThatKeyThem: a
// gRPC Generate with mm_inputs sends its images' placeholder tokens in its
// ids, the same for any two images of one size; as a chat with an image,
// it is looked up only once the servers' events have shown that they key
// blocks by their extra keys, and then finds only the blocks before the
// image.
func TestLocatorLooksUpAGRPCRequestWithImagesOnlyOnServersThatKeyThem(t *testing.T) {
	tokens := prompt(1, 4, -1) // the text and the image's placeholder tokens
	reg := registry.New()
	w := registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "a", Port: 1}, Name: "a", Address: netip.MustParseAddrPort("127.0.0.1:1")})
	ix := New(0)
	ix.Apply(w.ID(), []kvevents.Event{stored(1, tokens, 0, 4, "")}) // with image A, no extra_keys
	l := NewLocator(ix, reg, time.Second)
	var packed []byte
	for _, id := range tokens {
		packed = protowire.AppendVarint(packed, uint64(id))
	}
	tokenized := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), packed)
	msg := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), tokenized)
	mm := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte("image B's pixels"))
	msg = protowire.AppendBytes(protowire.AppendTag(msg, 7, protowire.BytesType), mm) // mm_inputs
	if len(msg) > 255 {
		t.Fatalf("the test's message is %d bytes, over its one-byte length", len(msg))
	}
	var r openai.Request
	if err := openai.ParseGRPC(openai.GRPCGenerate, append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...), &r); err != nil {
		t.Fatal(err)
	}
	locate := func() (bool, []policy.SharedHold) {
		t.Helper()
		var sh policy.Shared
		found, err := l.Locate(context.Background(), "", &r, &sh)
		if err != nil {
			t.Fatal(err)
		}
		return found, sh.Holds
	}
	wantLookedUpOnceMediaKeyed(t, ix, w.ID(), tokens, "a call", locate)
}

// wantLookedUpOnceMediaKeyed checks that what (a request with image B,
// whose prompt is tokens) is not looked up while worker id's server keys
// no block by its media, and is, as far as the block before the image,
// once the server restarts on a release that publishes extra_keys (image
// A's hash keying its second block).
func wantLookedUpOnceMediaKeyed(t *testing.T, ix *Index, id uint32, tokens []uint32, what string, locate func() (bool, []policy.SharedHold)) {
	t.Helper()
	if found, holds := locate(); found {
		t.Errorf("%s with image B was looked up before the servers keyed any block by its media: holds %+v", what, holds)
	}
	withImage := stored(2, tokens, 0, 4, "")
	withImage.Extra = []kvevents.ExtraKeys{{Block: 1, N: 2, Raw: []byte{0xa1, 'A', 0x00}}}
	ix.Clear(id)
	ix.Apply(id, []kvevents.Event{withImage})
	found, holds := locate()
	if want := []policy.SharedHold{{Worker: id, Share: 0.25}}; !found || !cmp.Equal(holds, want) {
		t.Errorf("image B looked up: found %v, holds %+v; want %+v (the block before the image)", found, holds, want)
	}
}

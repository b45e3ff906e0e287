package openai

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// frame puts a gRPC message's prefix before msg.
func frame(msg []byte) []byte {
	b := make([]byte, GRPCPrefixLen, GRPCPrefixLen+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, protowire.EncodeBool(v))
}

// packedIDs is the packed encoding of ids.
func packedIDs(ids ...uint64) []byte {
	var p []byte
	for _, id := range ids {
		p = protowire.AppendVarint(p, id)
	}
	return p
}

// tokenizedMsg is a TokenizedInput.
func tokenizedMsg(text string, ids ...uint64) []byte {
	var b []byte
	if text != "" {
		b = appendString(b, tokOriginalText, text)
	}
	if len(ids) > 0 {
		b = protowire.AppendTag(b, tokInputIDs, protowire.BytesType)
		b = protowire.AppendBytes(b, packedIDs(ids...))
	}
	return b
}

// generateText is a framed GenerateRequest with a text prompt.
func generateText(text string, stream bool) []byte {
	b := appendString(nil, reqID, "req-1")
	b = appendString(b, genText, text)
	b = protowire.AppendTag(b, 4, protowire.BytesType)                     // sampling_params
	b = protowire.AppendBytes(b, []byte{0x0d, 0, 0, 0x80, 0x3f, 0x40, 16}) // temperature 1.0, max_tokens 16
	if stream {
		b = appendBool(b, genStream, true)
	}
	return frame(b)
}

func embedded(num protowire.Number, msg []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

func TestParseGRPC(t *testing.T) {
	long := string(bytes.Repeat([]byte("shared system prompt "), 100))
	tests := map[string]struct {
		kind   Kind
		body   []byte
		prompt []string
		tokens int
		ids    []uint32 // the token ids, as the model server reads them
		stream bool
	}{
		"generate text": {
			kind: GRPCGenerate, body: generateText("hello world!", false),
			prompt: []string{"hello world!"}, tokens: 3,
		},
		"generate text, streamed": {
			kind: GRPCGenerate, body: generateText(long, true),
			prompt: []string{long}, tokens: len(long) / BytesPerToken, stream: true,
		},
		"generate tokenized with its text: the text is the prompt, the ids its tokens": {
			kind: GRPCGenerate, body: frame(embedded(genTokenized, tokenizedMsg("hi there", 1, 300, 70000))),
			prompt: []string{"hi there"}, tokens: 3, ids: []uint32{1, 300, 70000},
		},
		"generate tokenized ids alone: their varints are the prompt": {
			kind: GRPCGenerate, body: frame(embedded(genTokenized, tokenizedMsg("", 1, 300, 70000))),
			prompt: []string{string(packedIDs(1, 300, 70000))}, tokens: 3, ids: []uint32{1, 300, 70000},
		},
		"unpacked ids read as packed ones": {
			kind: GRPCGenerate,
			body: frame(embedded(genTokenized, protowire.AppendVarint(protowire.AppendTag(
				protowire.AppendVarint(protowire.AppendTag(nil, tokInputIDs, protowire.VarintType), 5),
				tokInputIDs, protowire.VarintType), 300))),
			prompt: []string{"\x05", string(packedIDs(300))}, tokens: 2, ids: []uint32{5, 300},
		},
		"tokenized given twice is merged": {
			kind:   GRPCGenerate,
			body:   frame(append(embedded(genTokenized, tokenizedMsg("", 1, 2)), embedded(genTokenized, tokenizedMsg("", 3))...)),
			prompt: []string{string(packedIDs(1, 2)), string(packedIDs(3))}, tokens: 3, ids: []uint32{1, 2, 3},
		},
		"text after tokenized replaces it, as the oneof does": {
			kind:   GRPCGenerate,
			body:   frame(appendString(embedded(genTokenized, tokenizedMsg("old", 1, 2)), genText, "new text")),
			prompt: []string{"new text"}, tokens: 2,
		},
		"tokenized after text replaces it": {
			kind:   GRPCGenerate,
			body:   frame(append(appendString(nil, genText, "old text"), embedded(genTokenized, tokenizedMsg("", 9))...)),
			prompt: []string{"\x09"}, tokens: 1, ids: []uint32{9},
		},
		"unknown fields, a group and a mistyped stream are skipped": {
			kind: GRPCGenerate,
			body: frame(appendString(append(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(
				protowire.AppendTag(appendString(nil, 99, "x"), 40, protowire.StartGroupType), 1, protowire.VarintType), 7),
				40, protowire.EndGroupType), appendString(nil, genStream, "yes")...), genText, "abcd")),
			prompt: []string{"abcd"}, tokens: 1,
		},
		"stream given twice: the last": {
			kind:   GRPCGenerate,
			body:   frame(appendBool(appendBool(appendString(nil, genText, "abcd"), genStream, true), genStream, false)),
			prompt: []string{"abcd"}, tokens: 1,
		},
		"embed": {
			kind: GRPCEmbed, body: frame(appendString(embedded(embedTokenized, tokenizedMsg("embed me", 4, 5)), reqID, "e")),
			prompt: []string{"embed me"}, tokens: 2, ids: []uint32{4, 5},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var r Request
			if err := ParseGRPC(tc.kind, tc.body, &r); err != nil {
				t.Fatalf("ParseGRPC: %v", err)
			}
			var prompt []string
			for _, s := range r.Prompt {
				prompt = append(prompt, string(s))
			}
			if diff := cmp.Diff(tc.prompt, prompt); diff != "" {
				t.Errorf("prompt (-want +got):\n%s", diff)
			}
			if r.Tokens != tc.tokens || r.Stream != tc.stream || r.Model != "" || r.Kind != tc.kind {
				t.Errorf("tokens %d, stream %v, model %q, kind %v; want %d, %v, \"\", %v", r.Tokens, r.Stream, r.Model, r.Kind, tc.tokens, tc.stream, tc.kind)
			}
			if got := r.TokenIDs(nil); !slices.Equal(got, tc.ids) {
				t.Errorf("token ids %v, want %v", got, tc.ids)
			}
		})
	}
}

// TestParseGRPCMediaIsItsMMInputs: a GenerateRequest with mm_inputs
// (field 7, even empty) has media, whose placeholder tokens its ids do not
// tell apart; one without has none, whatever other fields it carries.
func TestParseGRPCMediaIsItsMMInputs(t *testing.T) {
	ids := embedded(genTokenized, tokenizedMsg("", 1, 2, 3))
	for name, tc := range map[string]struct {
		msg   []byte
		media bool
	}{
		"mm_inputs":                {append(bytes.Clone(ids), embedded(genMMInputs, embedded(2, []byte("pixels")))...), true},
		"empty mm_inputs":          {append(bytes.Clone(ids), embedded(genMMInputs, nil)...), true},
		"mm_inputs before the ids": {append(embedded(genMMInputs, []byte{0x20, 9}), ids...), true},
		"none":                     {ids, false},
		"field 7 as a varint":      {appendUint(bytes.Clone(ids), genMMInputs, 1), false},
		"another field":            {append(bytes.Clone(ids), embedded(6, []byte("kv"))...), false},
	} {
		t.Run(name, func(t *testing.T) {
			var r Request
			if err := ParseGRPC(GRPCGenerate, frame(tc.msg), &r); err != nil {
				t.Fatal(err)
			}
			if r.Media != tc.media {
				t.Errorf("media %v, want %v", r.Media, tc.media)
			}
			if err := ParseGRPC(GRPCGenerate, generateText("next", false), &r); err != nil || r.Media {
				t.Errorf("the next request: media %v, %v; want none", r.Media, err)
			}
		})
	}
}

func TestParseGRPCRejects(t *testing.T) {
	good := generateText("hello", false)
	compressed := bytes.Clone(good)
	compressed[0] = 1
	badFlag := bytes.Clone(good)
	badFlag[0] = 2
	tests := map[string]struct {
		kind Kind
		body []byte
		want error
	}{
		"shorter than the prefix":      {GRPCGenerate, good[:3], ErrGRPCFrame},
		"truncated message":            {GRPCGenerate, good[:len(good)-1], ErrGRPCFrame},
		"two messages":                 {GRPCGenerate, append(bytes.Clone(good), good...), ErrGRPCFrame},
		"compressed":                   {GRPCGenerate, compressed, ErrGRPCCompressed},
		"flag byte 2":                  {GRPCGenerate, badFlag, ErrGRPCFrame},
		"a JSON body":                  {GRPCGenerate, []byte(`{"model":"m","prompt":"hi"}`), ErrGRPCFrame},
		"length past the field's end":  {GRPCGenerate, frame([]byte{0x1a, 10, 'a'}), ErrProto},
		"varint never ends":            {GRPCGenerate, frame([]byte{0x28, 0xff, 0xff}), ErrProto},
		"field number zero":            {GRPCGenerate, frame([]byte{0x02, 0}), ErrProto},
		"stray end group":              {GRPCGenerate, frame([]byte{0x0c}), ErrProto},
		"text not UTF-8":               {GRPCGenerate, frame(appendString(nil, genText, "\xff")), ErrProto},
		"bad packed id":                {GRPCGenerate, frame(embedded(genTokenized, []byte{0x12, 1, 0x80})), ErrProto},
		"mm_inputs cut short":          {GRPCGenerate, frame(append(embedded(genTokenized, tokenizedMsg("", 1)), 0x3a, 9, 1)), ErrProto},
		"generate without input":       {GRPCGenerate, frame(appendBool(nil, genStream, true)), ErrMissingInput},
		"embed without input":          {GRPCEmbed, frame(appendString(nil, reqID, "x")), ErrMissingInput},
		"embed of text (a Generate's)": {GRPCEmbed, frame(appendString(nil, genText, "x")), ErrMissingInput},
		"not a gRPC kind":              {Completions, good, ErrGRPCFrame},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var r Request
			err := ParseGRPC(tc.kind, tc.body, &r)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ParseGRPC = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestParseGRPCAllocatesNothing(t *testing.T) {
	body := frame(embedded(genTokenized, tokenizedMsg("", packedIDsN(2000)...)))
	var r Request
	if err := ParseGRPC(GRPCGenerate, body, &r); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = ParseGRPC(GRPCGenerate, body, &r) }); n != 0 {
		t.Errorf("ParseGRPC allocated %v times a call, want 0", n)
	}
}

// packedIDsN is n token ids of every size a varint takes for a uint32.
func packedIDsN(n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(i) * 2654435761 % (1 << 32) >> (i % 5 * 7)
	}
	return ids
}

// engineDescriptors builds the messages of vllm_engine.proto the picker
// reads, so that the model server's decoding (protobuf's own) can be
// compared with ParseGRPC's.
func engineDescriptors(t testing.TB) (generate, embed protoreflect.MessageDescriptor) {
	str, u32, b, msg := descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_UINT32,
		descriptorpb.FieldDescriptorProto_TYPE_BOOL, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	opt, rep := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL, descriptorpb.FieldDescriptorProto_LABEL_REPEATED
	field := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, label descriptorpb.FieldDescriptorProto_Label, msgType string, oneof *int32) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Type: typ.Enum(), Label: label.Enum(), JsonName: proto.String(name), OneofIndex: oneof}
		if msgType != "" {
			f.TypeName = proto.String(msgType)
		}
		return f
	}
	zero := proto.Int32(0)
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("vllm_engine_test.proto"), Package: proto.String("vllm.grpc.engine"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("TokenizedInput"), Field: []*descriptorpb.FieldDescriptorProto{
				field("original_text", 1, str, opt, "", nil),
				field("input_ids", 2, u32, rep, "", nil),
			}},
			{Name: proto.String("MultimodalInputs")}, // its fields unread: unknown here
			{Name: proto.String("GenerateRequest"), Field: []*descriptorpb.FieldDescriptorProto{
				field("request_id", 1, str, opt, "", nil),
				field("tokenized", 2, msg, opt, ".vllm.grpc.engine.TokenizedInput", zero),
				field("text", 3, str, opt, "", zero),
				field("stream", 5, b, opt, "", nil),
				field("mm_inputs", 7, msg, opt, ".vllm.grpc.engine.MultimodalInputs", nil),
			}, OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("input")}}},
			{Name: proto.String("EmbedRequest"), Field: []*descriptorpb.FieldDescriptorProto{
				field("request_id", 1, str, opt, "", nil),
				field("tokenized", 2, msg, opt, ".vllm.grpc.engine.TokenizedInput", nil),
			}},
		},
	}
	f, err := protodesc.NewFile(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f.Messages().ByName("GenerateRequest"), f.Messages().ByName("EmbedRequest")
}

// FuzzParseGRPC checks ParseGRPC against protobuf's own decoding of the
// same message: whatever protobuf accepts, ParseGRPC accepts (sampling
// parameters aside, which it skips unread), with the same prompt, token
// count and stream flag; and its prompt segments alias the body.
func FuzzParseGRPC(f *testing.F) {
	f.Add(false, generateText("hello world", true)[GRPCPrefixLen:])
	f.Add(false, embedded(genTokenized, tokenizedMsg("", 1, 2, 1<<20)))
	f.Add(false, append(embedded(genTokenized, tokenizedMsg("a", 1)), embedded(genTokenized, tokenizedMsg("", 3))...))
	f.Add(true, appendString(embedded(embedTokenized, tokenizedMsg("embed", 4)), reqID, "r"))
	f.Add(false, []byte{0x1a, 10, 'a'})
	f.Add(false, appendString(embedded(genTokenized, tokenizedMsg("", 1, 2)), genText, "text last"))
	f.Add(false, append(embedded(genMMInputs, nil), embedded(genTokenized, tokenizedMsg("", 1, 2))...))
	generate, embed := engineDescriptors(f)
	f.Fuzz(func(t *testing.T, isEmbed bool, msg []byte) {
		kind, desc := GRPCGenerate, generate
		if isEmbed {
			kind, desc = GRPCEmbed, embed
		}
		body := frame(msg)
		var r Request
		err := ParseGRPC(kind, body, &r)
		for _, s := range r.Prompt {
			if len(s) == 0 || !within(s, body) {
				t.Fatalf("segment %q is empty or outside the body", s)
			}
		}
		// Mutated prefixes: never a panic, and an error unless exactly one
		// uncompressed message.
		for _, cut := range []int{0, 4, len(body) - 1} {
			if cut >= 0 && cut < len(body) {
				var r2 Request
				if ParseGRPC(kind, body[:cut], &r2) == nil {
					t.Fatalf("ParseGRPC accepted a body cut to %d of %d bytes", cut, len(body))
				}
			}
		}
		m := dynamicpb.NewMessage(desc)
		if proto.Unmarshal(msg, m) != nil {
			return
		}
		fields := m.Descriptor().Fields()
		tok := m.Get(fields.ByName("tokenized")).Message()
		hasTok := m.Has(fields.ByName("tokenized"))
		hasText := !isEmbed && m.Has(fields.ByName("text"))
		if !hasTok && !hasText {
			if !errors.Is(err, ErrMissingInput) {
				t.Fatalf("protobuf finds no input; ParseGRPC = %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("protobuf decodes %x; ParseGRPC = %v", msg, err)
		}
		var text string
		var ids []byte
		switch {
		case hasText:
			text = m.Get(fields.ByName("text")).String()
		default:
			text = tok.Get(tok.Descriptor().Fields().ByName("original_text")).String()
			list := tok.Get(tok.Descriptor().Fields().ByName("input_ids")).List()
			for i := range list.Len() {
				ids = protowire.AppendVarint(ids, uint64(uint32(list.Get(i).Uint())))
			}
		}
		wantPrompt, wantTokens := []byte(text), len(text)/BytesPerToken
		if text == "" {
			wantPrompt = ids
		}
		if len(ids) > 0 {
			wantTokens = 0
			for rest := ids; len(rest) > 0; wantTokens++ {
				_, n := protowire.ConsumeVarint(rest)
				rest = rest[n:]
			}
		}
		// An id's varint may be written longer than its shortest form:
		// the prompt holds it as written, so compare only the text case
		// byte for byte and the ids' count otherwise.
		if text != "" && !bytes.Equal(bytes.Join(r.Prompt, nil), wantPrompt) {
			t.Fatalf("prompt %q, protobuf's %q", bytes.Join(r.Prompt, nil), wantPrompt)
		}
		if r.Tokens != wantTokens {
			t.Fatalf("tokens %d, protobuf's %d", r.Tokens, wantTokens)
		}
		if !isEmbed && r.Stream != m.Get(fields.ByName("stream")).Bool() {
			t.Fatalf("stream %v, protobuf's %v", r.Stream, !r.Stream)
		}
		if hasMM := !isEmbed && m.Has(fields.ByName("mm_inputs")); r.Media != hasMM {
			t.Fatalf("media %v, protobuf's mm_inputs present: %v", r.Media, hasMM)
		}
		var wantIDs []uint32
		if hasTok {
			list := tok.Get(tok.Descriptor().Fields().ByName("input_ids")).List()
			for i := range list.Len() {
				wantIDs = append(wantIDs, uint32(list.Get(i).Uint()))
			}
		}
		if got := r.TokenIDs(nil); !slices.Equal(got, wantIDs) {
			t.Fatalf("token ids %v, protobuf's %v", got, wantIDs)
		}
	})
}

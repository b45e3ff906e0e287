package vllmgrpc

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// TokenizedInput is a pre-tokenized prompt: original_text 1, input_ids 2.
type TokenizedInput struct {
	OriginalText string
	InputIDs     []uint32
}

func (t *TokenizedInput) marshal() []byte {
	b := putString(nil, 1, t.OriginalText)
	return putPackedUint32s(b, 2, t.InputIDs)
}

func (t *TokenizedInput) unmarshal(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (err error) {
		switch num {
		case 1:
			t.OriginalText, err = stringField(num, typ, v)
		case 2:
			t.InputIDs, err = appendUint32s(t.InputIDs, num, typ, v)
		}
		return err
	})
}

// GenerateRequest is a generation request: request_id 1, the input as one
// of tokenized 2 or text 3, sampling_params 4 (of which max_tokens 8 and
// n 15 are read), stream 5.
type GenerateRequest struct {
	RequestID string
	// Tokenized, when set, is the input; otherwise Text is.
	Tokenized *TokenizedInput
	Text      string
	// MaxTokens is sampling_params.max_tokens, nil when unset.
	MaxTokens *uint32
	// N is sampling_params.n, the parallel samples asked for (0: unset).
	N      uint32
	Stream bool
}

// Marshal encodes r.
func (r *GenerateRequest) Marshal() []byte {
	b := putString(nil, 1, r.RequestID)
	if r.Tokenized != nil {
		b = putMessage(b, 2, r.Tokenized.marshal())
	} else if r.Text != "" {
		b = putString(b, 3, r.Text)
	}
	if r.MaxTokens != nil || r.N != 0 {
		var sp []byte
		if r.MaxTokens != nil {
			sp = protowire.AppendTag(sp, 8, protowire.VarintType)
			sp = protowire.AppendVarint(sp, uint64(*r.MaxTokens))
		}
		sp = putUint(sp, 15, uint64(r.N))
		b = putMessage(b, 4, sp)
	}
	return putBool(b, 5, r.Stream)
}

// Unmarshal decodes b into r. Of a oneof given twice, the last one wins.
func (r *GenerateRequest) Unmarshal(b []byte) error {
	*r = GenerateRequest{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (err error) {
		switch num {
		case 1:
			r.RequestID, err = stringField(num, typ, v)
		case 2:
			if v, err = bytesField(num, typ, v); err != nil {
				return err
			}
			if r.Tokenized == nil {
				r.Tokenized = &TokenizedInput{}
			}
			r.Text = ""
			err = r.Tokenized.unmarshal(v)
		case 3:
			r.Tokenized = nil
			r.Text, err = stringField(num, typ, v)
		case 4:
			if v, err = bytesField(num, typ, v); err != nil {
				return err
			}
			err = r.unmarshalSampling(v)
		case 5:
			r.Stream, err = boolField(num, typ, v)
		}
		return err
	})
}

func (r *GenerateRequest) unmarshalSampling(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case 8:
			x, err := uint32Field(num, typ, v)
			if err != nil {
				return err
			}
			r.MaxTokens = &x
		case 15:
			x, err := uint32Field(num, typ, v)
			if err != nil {
				return err
			}
			r.N = x
		}
		return nil
	})
}

// Chunk is a GenerateStreamChunk: token_ids 1 (the new ones),
// prompt_tokens 2, completion_tokens 3, cached_tokens 4.
type Chunk struct {
	TokenIDs         []uint32
	PromptTokens     uint32
	CompletionTokens uint32
	CachedTokens     uint32
}

// Complete is a GenerateComplete: output_ids 1 (all of them),
// finish_reason 2, prompt_tokens 3, completion_tokens 4, cached_tokens 5.
type Complete struct {
	OutputIDs        []uint32
	FinishReason     string
	PromptTokens     uint32
	CompletionTokens uint32
	CachedTokens     uint32
}

// GenerateResponse is one message of the Generate stream: chunk 1 or
// complete 2.
type GenerateResponse struct {
	Chunk    *Chunk
	Complete *Complete
}

// Marshal encodes r.
func (r *GenerateResponse) Marshal() []byte {
	switch {
	case r.Chunk != nil:
		c := r.Chunk
		m := putPackedUint32s(nil, 1, c.TokenIDs)
		m = putUint(m, 2, uint64(c.PromptTokens))
		m = putUint(m, 3, uint64(c.CompletionTokens))
		m = putUint(m, 4, uint64(c.CachedTokens))
		return putMessage(nil, 1, m)
	case r.Complete != nil:
		c := r.Complete
		m := putPackedUint32s(nil, 1, c.OutputIDs)
		m = putString(m, 2, c.FinishReason)
		m = putUint(m, 3, uint64(c.PromptTokens))
		m = putUint(m, 4, uint64(c.CompletionTokens))
		m = putUint(m, 5, uint64(c.CachedTokens))
		return putMessage(nil, 2, m)
	}
	return nil
}

// Unmarshal decodes b into r.
func (r *GenerateResponse) Unmarshal(b []byte) error {
	*r = GenerateResponse{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (err error) {
		switch num {
		case 1:
			if v, err = bytesField(num, typ, v); err != nil {
				return err
			}
			c := &Chunk{}
			r.Chunk, r.Complete = c, nil
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte) (err error) {
				switch num {
				case 1:
					c.TokenIDs, err = appendUint32s(c.TokenIDs, num, typ, v)
				case 2:
					c.PromptTokens, err = uint32Field(num, typ, v)
				case 3:
					c.CompletionTokens, err = uint32Field(num, typ, v)
				case 4:
					c.CachedTokens, err = uint32Field(num, typ, v)
				}
				return err
			})
		case 2:
			if v, err = bytesField(num, typ, v); err != nil {
				return err
			}
			c := &Complete{}
			r.Chunk, r.Complete = nil, c
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte) (err error) {
				switch num {
				case 1:
					c.OutputIDs, err = appendUint32s(c.OutputIDs, num, typ, v)
				case 2:
					c.FinishReason, err = stringField(num, typ, v)
				case 3:
					c.PromptTokens, err = uint32Field(num, typ, v)
				case 4:
					c.CompletionTokens, err = uint32Field(num, typ, v)
				case 5:
					c.CachedTokens, err = uint32Field(num, typ, v)
				}
				return err
			})
		}
		return nil
	})
}

// EmbedRequest is an embedding request: request_id 1, tokenized 2.
type EmbedRequest struct {
	RequestID string
	Tokenized TokenizedInput
}

// Marshal encodes r.
func (r *EmbedRequest) Marshal() []byte {
	b := putString(nil, 1, r.RequestID)
	return putMessage(b, 2, r.Tokenized.marshal())
}

// Unmarshal decodes b into r.
func (r *EmbedRequest) Unmarshal(b []byte) error {
	*r = EmbedRequest{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (err error) {
		switch num {
		case 1:
			r.RequestID, err = stringField(num, typ, v)
		case 2:
			if v, err = bytesField(num, typ, v); err != nil {
				return err
			}
			err = r.Tokenized.unmarshal(v)
		}
		return err
	})
}

// EmbedResponse is embedding 1, prompt_tokens 2, embedding_dim 3.
type EmbedResponse struct {
	Embedding    []float32
	PromptTokens uint32
	EmbeddingDim uint32
}

// Marshal encodes r.
func (r *EmbedResponse) Marshal() []byte {
	b := putPackedFloats(nil, 1, r.Embedding)
	b = putUint(b, 2, uint64(r.PromptTokens))
	return putUint(b, 3, uint64(r.EmbeddingDim))
}

// Unmarshal decodes b into r.
func (r *EmbedResponse) Unmarshal(b []byte) error {
	*r = EmbedResponse{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (err error) {
		switch num {
		case 1:
			r.Embedding, err = appendFloats(r.Embedding, num, typ, v)
		case 2:
			r.PromptTokens, err = uint32Field(num, typ, v)
		case 3:
			r.EmbeddingDim, err = uint32Field(num, typ, v)
		}
		return err
	})
}

// HealthCheckResponse is healthy 1, message 2.
type HealthCheckResponse struct {
	Healthy bool
	Message string
}

// Marshal encodes r.
func (r *HealthCheckResponse) Marshal() []byte {
	return putString(putBool(nil, 1, r.Healthy), 2, r.Message)
}

// Unmarshal decodes b into r.
func (r *HealthCheckResponse) Unmarshal(b []byte) error {
	*r = HealthCheckResponse{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (err error) {
		switch num {
		case 1:
			r.Healthy, err = boolField(num, typ, v)
		case 2:
			r.Message, err = stringField(num, typ, v)
		}
		return err
	})
}

// AbortRequest is request_ids 1.
type AbortRequest struct {
	RequestIDs []string
}

// Marshal encodes r.
func (r *AbortRequest) Marshal() []byte {
	var b []byte
	for _, id := range r.RequestIDs {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, id)
	}
	return b
}

// Unmarshal decodes b into r.
func (r *AbortRequest) Unmarshal(b []byte) error {
	*r = AbortRequest{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 1 {
			return nil
		}
		id, err := stringField(num, typ, v)
		r.RequestIDs = append(r.RequestIDs, id)
		return err
	})
}

// ModelInfo is a GetModelInfoResponse: model_path 1, is_generation 2,
// max_context_length 3, vocab_size 4, supports_vision 5.
type ModelInfo struct {
	ModelPath        string
	IsGeneration     bool
	MaxContextLength uint32
	VocabSize        uint32
	SupportsVision   bool
}

// Marshal encodes r.
func (r *ModelInfo) Marshal() []byte {
	b := putString(nil, 1, r.ModelPath)
	b = putBool(b, 2, r.IsGeneration)
	b = putUint(b, 3, uint64(r.MaxContextLength))
	b = putUint(b, 4, uint64(r.VocabSize))
	return putBool(b, 5, r.SupportsVision)
}

// Unmarshal decodes b into r.
func (r *ModelInfo) Unmarshal(b []byte) error {
	*r = ModelInfo{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (err error) {
		switch num {
		case 1:
			r.ModelPath, err = stringField(num, typ, v)
		case 2:
			r.IsGeneration, err = boolField(num, typ, v)
		case 3:
			r.MaxContextLength, err = uint32Field(num, typ, v)
		case 4:
			r.VocabSize, err = uint32Field(num, typ, v)
		case 5:
			r.SupportsVision, err = boolField(num, typ, v)
		}
		return err
	})
}

// ServerInfo is a GetServerInfoResponse: active_requests 1, is_paused 2,
// last_receive_timestamp 3, uptime_seconds 4, server_type 5.
type ServerInfo struct {
	ActiveRequests       uint32
	IsPaused             bool
	LastReceiveTimestamp float64
	UptimeSeconds        float64
	ServerType           string
}

// Marshal encodes r.
func (r *ServerInfo) Marshal() []byte {
	b := putUint(nil, 1, uint64(r.ActiveRequests))
	b = putBool(b, 2, r.IsPaused)
	b = putDouble(b, 3, r.LastReceiveTimestamp)
	b = putDouble(b, 4, r.UptimeSeconds)
	return putString(b, 5, r.ServerType)
}

// Unmarshal decodes b into r.
func (r *ServerInfo) Unmarshal(b []byte) error {
	*r = ServerInfo{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (err error) {
		switch num {
		case 1:
			r.ActiveRequests, err = uint32Field(num, typ, v)
		case 2:
			r.IsPaused, err = boolField(num, typ, v)
		case 3:
			r.LastReceiveTimestamp, err = doubleField(num, typ, v)
		case 4:
			r.UptimeSeconds, err = doubleField(num, typ, v)
		case 5:
			r.ServerType, err = stringField(num, typ, v)
		}
		return err
	})
}

// String describes r for test failures.
func (r *GenerateResponse) String() string {
	switch {
	case r.Chunk != nil:
		return fmt.Sprintf("chunk%+v", *r.Chunk)
	case r.Complete != nil:
		return fmt.Sprintf("complete%+v", *r.Complete)
	}
	return "empty"
}

package openai_test

import (
	"fmt"

	"github.com/inferpick/inferpick/picker/openai"
)

// Parse reads a body once: the model, and the prompt as segments aliasing
// the body, in the order a chat template renders them.
func ExampleParse() {
	body := []byte(`{"model":"llama","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`)
	var req openai.Request
	if err := openai.Parse(openai.KindOf("/v1/chat/completions"), body, &req); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(req.Model, len(req.Prompt) > 0, req.PromptLen() > 0)
	// Output: llama true true
}

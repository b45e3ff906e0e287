package rewrite

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestPrecedence(t *testing.T) {
	tbl := NewTable()
	tbl.Set("newer-exact", Object{Created: t0.Add(time.Hour), Rules: []Rule{
		{Models: []string{"a"}, Targets: []Target{{Model: "a-newer"}}},
	}})
	tbl.Set("older", Object{Created: t0, Rules: []Rule{
		{Targets: []Target{{Model: "everything"}}},
		{Models: []string{"a", "b"}, Targets: []Target{{Model: "ab-older"}}},
		{Models: []string{"b"}, Targets: []Target{{Model: "b-second-rule"}}},
		{Models: []string{"c"}}, // no targets: no rewrite
	}})
	tbl.Set("newest-generic", Object{Created: t0.Add(2 * time.Hour), Rules: []Rule{
		{Targets: []Target{{Model: "generic-newest"}}},
	}})
	cases := map[string]string{
		"a": "ab-older",   // the older rewrite's exact rule wins
		"b": "ab-older",   // the first rule of a rewrite wins
		"c": "everything", // a rule without targets does not match
		"z": "everything", // the oldest generic rule
		"":  "everything",
	}
	for model, want := range cases {
		d, ok := tbl.Rewrite(model, "id")
		if !ok || d.Model != want {
			t.Errorf("Rewrite(%q) = %q, %v; want %q", model, d.Model, ok, want)
		}
	}
	tbl.Delete("older")
	if d, _ := tbl.Rewrite("a", "id"); d.Model != "a-newer" || d.Source != "newer-exact" {
		t.Errorf("after deleting the older rewrite, a goes to %q from %q; want a-newer from newer-exact", d.Model, d.Source)
	}
	if d, _ := tbl.Rewrite("b", "id"); d.Model != "generic-newest" {
		t.Errorf("after deleting the older rewrite, b goes to %q; want generic-newest", d.Model)
	}
	tbl.Delete("newest-generic")
	tbl.Delete("newer-exact")
	if d, ok := tbl.Rewrite("a", "id"); ok {
		t.Errorf("an empty table rewrote a to %q", d.Model)
	}
}

func TestWeightsDeterministicAndProportional(t *testing.T) {
	tbl := NewTable()
	tbl.Set("canary", Object{Created: t0, Rules: []Rule{{
		Models:  []string{"adapter"},
		Targets: []Target{{Model: "adapter-v1", Weight: 90}, {Model: "adapter-v2", Weight: 10}},
	}}})
	const n = 20000
	counts := map[string]int{}
	for i := range n {
		id := "req-" + strconv.Itoa(i)
		d, _ := tbl.Rewrite("adapter", id)
		for range 3 {
			if again, _ := tbl.Rewrite("adapter", id); again.Model != d.Model {
				t.Fatalf("request %s went to %s, then to %s", id, d.Model, again.Model)
			}
		}
		counts[d.Model]++
	}
	// 10% of 20000 is 2000 with a standard deviation of about 42.
	if v2 := counts["adapter-v2"]; v2 < 1800 || v2 > 2200 {
		t.Errorf("adapter-v2 got %d of %d requests, want about 2000: %v", v2, n, counts)
	}
}

func TestUnweightedTargetsShareEqually(t *testing.T) {
	tbl := NewTable()
	tbl.Set("split", Object{Created: t0, Rules: []Rule{{
		Targets: []Target{{Model: "x"}, {Model: "y"}, {Model: "z"}},
	}}})
	counts := map[string]int{}
	for i := range 9000 {
		d, _ := tbl.Rewrite("any", strconv.Itoa(i))
		counts[d.Model]++
	}
	for _, m := range []string{"x", "y", "z"} {
		if c := counts[m]; c < 2700 || c > 3300 {
			t.Errorf("%s got %d of 9000 requests, want about 3000: %v", m, c, counts)
		}
	}
}

func TestDecisionJSONIsEscaped(t *testing.T) {
	tbl := NewTable()
	model := "we\"ird\\name\u00e9<>"
	tbl.Set("r", Object{Rules: []Rule{{Targets: []Target{{Model: model}}}}})
	d, _ := tbl.Rewrite("m", "id")
	var got string
	if err := json.Unmarshal([]byte(`"`+string(d.JSON)+`"`), &got); err != nil {
		t.Fatalf("the spliced value %q is not a JSON string's content: %v", d.JSON, err)
	}
	if diff := cmp.Diff(model, got); diff != "" {
		t.Errorf("decoded target (-want +got):\n%s", diff)
	}
}

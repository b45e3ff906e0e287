package registry

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLabelsHoldTheValuesOfTheKeysRead(t *testing.T) {
	keys := []string{"a", "example.com/b", "c"}
	cases := map[string]struct {
		pod    map[string]string
		values []any // a value, or nil for an absent label, by key
	}{
		"none":              {pod: nil, values: []any{nil, nil, nil}},
		"all":               {pod: map[string]string{"a": "1", "example.com/b": "two", "c": "3"}, values: []any{"1", "two", "3"}},
		"an empty value":    {pod: map[string]string{"example.com/b": ""}, values: []any{nil, "", nil}},
		"others left out":   {pod: map[string]string{"c": "x", "d": "y"}, values: []any{nil, nil, "x"}},
		"a value with NULs": {pod: map[string]string{"a": "v\x00w"}, values: []any{"v", nil, nil}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := LabelsOf(keys, tc.pod)
			want := map[string]string{}
			for i, v := range tc.values {
				got, ok := l.Value(i)
				if s, present := v.(string); ok != present || got != s {
					t.Errorf("Value(%d) = %q, %v; want %v", i, got, ok, v)
				}
				if s, present := v.(string); present {
					want[keys[i]] = s
				}
			}
			if len(want) == 0 {
				want = nil
			}
			if diff := cmp.Diff(want, l.Map()); diff != "" {
				t.Errorf("Map() (-want +got):\n%s", diff)
			}
			if v, ok := l.Value(len(keys)); ok {
				t.Errorf("Value past the keys = %q, true", v)
			}
			if l != LabelsOf(keys, tc.pod) {
				t.Error("the same labels read twice compare unequal")
			}
		})
	}
}

package version

import "testing"

func TestString(t *testing.T) {
	cases := map[string]struct {
		version, revision, want string
	}{
		"set by the linker": {version: "0.1.0", revision: "abc123", want: "inferpick 0.1.0 (revision abc123)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v, r := Version, Revision
			t.Cleanup(func() { Version, Revision = v, r })
			Version, Revision = tc.version, tc.revision
			if got := String("inferpick"); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

package devenv

import "testing"

func TestAdapterListenPort(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
		ok   bool
	}{
		{"", AdapterPort, true},
		{"16443", 16443, true},
		{"443", 0, false},
		{"70000", 0, false},
		{"https", 0, false},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(AdapterPortEnv, tc.env)
			got, err := AdapterListenPort()
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("AdapterListenPort() with %s=%q = %d, %v; want %d (ok %v)", AdapterPortEnv, tc.env, got, err, tc.want, tc.ok)
			}
		})
	}
}

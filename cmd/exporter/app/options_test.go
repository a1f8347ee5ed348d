package app

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(o *Options)
		wantErr []string
	}{
		{"defaults", func(*Options) {}, nil},
		{"sim", func(o *Options) { o.Backend = "sim" }, nil},
		{"unknown backend", func(o *Options) { o.Backend = "dcgm" }, []string{`--backend must be nvml or sim, got "dcgm"`}},
		{"interval too short", func(o *Options) { o.CollectInterval = time.Millisecond }, []string{"--collect-interval must be at least 10ms"}},
		{"no sim GPUs", func(o *Options) { o.Backend, o.SimGPUs = "sim", 0 }, []string{"--sim-gpus must be between 1 and 64, got 0"}},
		{"too many sim GPUs", func(o *Options) { o.Backend, o.SimGPUs = "sim", 65 }, []string{"--sim-gpus"}},
		{"sim GPUs ignored on nvml", func(o *Options) { o.SimGPUs = 0 }, nil},
		{"zero pod-resources interval", func(o *Options) { o.PodResourcesInterval = 0 }, []string{"--pod-resources-interval"}},
		{"negative pod-resources timeout", func(o *Options) { o.PodResourcesTimeout = -time.Second }, []string{"--pod-resources-timeout"}},
		{"zero read timeout", func(o *Options) { o.ReadTimeout = 0 }, []string{"--web.read-timeout", "must not exceed"}},
		{"zero header timeout", func(o *Options) { o.ReadHeaderTimeout = 0 }, []string{"--web.read-header-timeout"}},
		{"zero write timeout", func(o *Options) { o.WriteTimeout = 0 }, []string{"--web.write-timeout"}},
		{"header timeout above read timeout", func(o *Options) { o.ReadHeaderTimeout = time.Minute }, []string{"must not exceed --web.read-timeout"}},
		{"negative max requests", func(o *Options) { o.MaxRequests = -1 }, []string{"--web.max-requests"}},
		{"no request limit", func(o *Options) { o.MaxRequests = 0 }, nil},
		{"wait as long as the write timeout", func(o *Options) { o.MaxRequestsWait = o.WriteTimeout }, []string{"--web.max-requests-wait (30s) must be shorter"}},
		{"schema 4.10", func(o *Options) { o.DCGMSchema = "4.10" }, nil},
		{"unknown schema", func(o *Options) { o.DCGMSchema = "4.9" }, []string{`--dcgm-schema must be 4.8 or 4.10, got "4.9"`}},
		{"negative XID window", func(o *Options) { o.XIDCountWindow = -time.Second }, []string{"--xid-count-window"}},
		{"no XID count", func(o *Options) { o.XIDCountWindow = 0 }, nil},
		{"bad label allowlist", func(o *Options) { o.PodLabelAllowlist = "team,(" }, []string{"--kubernetes-pod-label-allowlist-regex"}},
		{"reserved lane without slots", func(o *Options) { o.ReservedTokenFile, o.ReservedMaxRequests = "/t", 0 }, []string{"--web.reserved-max-requests"}},
		{"every error at once", func(o *Options) {
			o.Backend, o.CollectInterval, o.PodResourcesTimeout = "x", 0, 0
		}, []string{"--backend", "--collect-interval", "--pod-resources-timeout"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.mutate(o)
			err := o.Validate()
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestFlags(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("exporter", pflag.ContinueOnError)
	o.AddFlags(fs)
	err := fs.Parse([]string{"--backend=sim", "--sim-gpus=4", "--sim-mig-profiles=3g.40gb, 1g.10gb,",
		"--collect-interval=250ms", "--pod-resources-socket=", "--web.listen-address=127.0.0.1:0", "--hostname=n1",
		"--web.read-header-timeout=2s", "--web.read-timeout=3s", "--web.write-timeout=4s", "--web.max-requests=5", "--web.max-requests-wait=500ms"})
	if err != nil {
		t.Fatal(err)
	}
	if o.ReadHeaderTimeout != 2*time.Second || o.ReadTimeout != 3*time.Second || o.WriteTimeout != 4*time.Second ||
		o.MaxRequests != 5 || o.MaxRequestsWait != 500*time.Millisecond {
		t.Errorf("parsed web options = %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	if o.Backend != "sim" || o.SimGPUs != 4 || o.CollectInterval != 250*time.Millisecond ||
		o.PodResourcesSocket != "" || o.ListenAddress != "127.0.0.1:0" || o.Hostname != "n1" {
		t.Errorf("parsed options = %+v", o)
	}
	if got := splitList(o.SimMIGProfiles); len(got) != 2 || got[0] != "3g.40gb" || got[1] != "1g.10gb" {
		t.Errorf("splitList(%q) = %q", o.SimMIGProfiles, got)
	}
}

func TestCompleteHostname(t *testing.T) {
	t.Setenv("NODE_NAME", "node-from-env")
	o := NewOptions()
	o.Complete()
	if o.Hostname != "node-from-env" {
		t.Errorf("Hostname = %q, want $NODE_NAME", o.Hostname)
	}
	o = NewOptions()
	o.Hostname = "explicit"
	o.Complete()
	if o.Hostname != "explicit" {
		t.Errorf("Hostname = %q, want the flag's value", o.Hostname)
	}
	t.Setenv("NODE_NAME", "")
	o = NewOptions()
	o.Complete()
	if o.Hostname == "" {
		t.Error("Hostname empty without $NODE_NAME; want the host name")
	}
}

package app

import (
	"testing"
	"time"
)

func TestValidateForward(t *testing.T) {
	withForward := func(f func(*ForwardOptions)) func(*Options) {
		return func(o *Options) {
			o.Forward.URL, o.Forward.ClientCertFile, o.Forward.ClientKeyFile = "https://prometheus-adapter.monitoring.svc:443", "proxy.crt", "proxy.key"
			f(&o.Forward)
		}
	}
	checkValidate(t, []validateCase{
		{"off by default", func(*Options) {}, ""},
		{"on", withForward(func(*ForwardOptions) {}), ""},
		{"plain http", withForward(func(f *ForwardOptions) { f.URL = "http://keda-operator-metrics-apiserver.keda.svc:443" }), "want https://"},
		{"a path", withForward(func(f *ForwardOptions) { f.URL = "https://a.b.svc:443/apis" }), "want https://"},
		{"no client certificate", withForward(func(f *ForwardOptions) { f.ClientCertFile = "" }), "--forward-client-cert-file"},
		{"no timeout", withForward(func(f *ForwardOptions) { f.Timeout = 0 }), "--forward-timeout"},
		{"discovery too often", withForward(func(f *ForwardOptions) { f.DiscoveryInterval = time.Millisecond }), "--forward-discovery-interval"},
	}, nil)
}

// TestForwardOffServesLocal: without --forward-to the provider served is
// gpuscale's own, untouched.
func TestForwardOffServesLocal(t *testing.T) {
	o := defaultForwardOptions()
	served, run, err := o.wrap(nil, nil, nil)
	if err != nil || served != nil || run != nil {
		t.Fatalf("wrap with federation off = %v, %v, %v; want the local provider and no loop", served, run != nil, err)
	}
}

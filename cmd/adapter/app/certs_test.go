package app

import (
	"slices"
	"testing"
	"time"
)

// TestValidateCerts: the runtime certificate flags, alone and with the
// KEDA scaler's client credentials.
func TestValidateCerts(t *testing.T) {
	on := func(o *Options) {
		o.Certs.Secret, o.Certs.Namespace, o.Certs.Service = "gpuscale-adapter-certs", "gpuscale", "gpuscale-adapter"
	}
	keda := func(o *Options) {
		on(o)
		o.KEDAScaler.Port, o.Certs.KEDAClientSecret = 6000, "keda/gpuscale-keda-client"
	}
	checkValidate(t, []validateCase{
		{"off", func(*Options) {}, ""},
		{"on", on, ""},
		{"no namespace", func(o *Options) { on(o); o.Certs.Namespace = "" }, "--certs-namespace"},
		{"no service", func(o *Options) { on(o); o.Certs.Service = "" }, "--certs-service"},
		{"CA shorter than three certificates", func(o *Options) { on(o); o.Certs.CAValidity = 2 * o.Certs.Validity }, "--ca-validity"},
		{"validity below 3s", func(o *Options) { on(o); o.Certs.Validity, o.Certs.CAValidity = time.Second, time.Hour }, "--cert-validity"},
		{"KEDA client credentials", keda, ""},
		{"KEDA client credentials without the secret", func(o *Options) { keda(o); o.Certs.Secret = "" }, "needs --certs-secret"},
		{"KEDA client credentials without the port", func(o *Options) { keda(o); o.KEDAScaler.Port = 0 }, "needs --keda-scaler-port"},
		{"KEDA client credentials and a CA file", func(o *Options) { keda(o); o.KEDAScaler.ClientCAFile = "/ca.crt" }, "excludes --keda-scaler-client-ca-file"},
		{"KEDA client Secret without a namespace", func(o *Options) { keda(o); o.Certs.KEDAClientSecret = "gpuscale-keda-client" }, "want NAMESPACE/NAME"},
	}, nil)
}

func TestCertDNSNames(t *testing.T) {
	o := defaultCertOptions()
	o.Namespace, o.Service = "gpu", "gs-gpuscale-adapter"
	want := []string{"gs-gpuscale-adapter.gpu.svc", "gs-gpuscale-adapter", "gs-gpuscale-adapter.gpu", "gs-gpuscale-adapter.gpu.svc.cluster.local"}
	if got := o.dnsNames(); !slices.Equal(got, want) {
		t.Errorf("dnsNames() = %v, want %v", got, want)
	}
}

package federation_test

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/adapter/federation"
)

// TestTLSIsVerified: the backend's certificate must chain to the CA file
// and name the host of --forward-to.
func TestTLSIsVerified(t *testing.T) {
	b, files := newFakeBackend(t, backendHost)
	_, otherFiles := newFakeBackend(t, backendHost)
	cases := []struct{ name, url, ca string }{
		{"a name the certificate does not hold", b.url("localhost"), files.ca},
		{"a certificate from another CA", b.url("127.0.0.1"), otherFiles.ca},
		{"the system roots", b.url("127.0.0.1"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			backend, err := federation.NewBackend(federation.BackendConfig{URL: c.url, CAFile: c.ca, ClientCertFile: files.cert, ClientKeyFile: files.key})
			if err != nil {
				t.Fatal(err)
			}
			p := federation.New(&localProvider{}, backend, nil, nil)
			_, err = p.GetExternalMetric(asAlice(), "ns1", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: "x"})
			if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("err = %v, want a certificate error", err)
			}
		})
	}
	if n := len(b.requests()); n != 0 {
		t.Errorf("the backend served %d requests over unverified TLS", n)
	}
}

func TestNewBackendRejects(t *testing.T) {
	for _, c := range []federation.BackendConfig{
		{URL: "http://backend.metrics.svc:443"},
		{URL: "https://"},
		{URL: "https://backend.metrics.svc:443/apis"},
		{URL: "https://backend.metrics.svc:443", ClientCertFile: "proxy.crt"},
	} {
		if _, err := federation.NewBackend(c); err == nil {
			t.Errorf("NewBackend(%+v) accepted", c)
		}
	}
}

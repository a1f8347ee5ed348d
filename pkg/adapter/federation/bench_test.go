package federation_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

// BenchmarkForwardedObjectMetric is one forwarded Object metric through the
// provider (identity headers, verified TLS with a client certificate,
// decoding and conversion) against a loopback backend; BenchmarkDirectGET
// is the same GET with a plain net/http client, so their difference is
// what the federation code adds.
func BenchmarkForwardedObjectMetric(b *testing.B) {
	f := newFixture(b, 0)
	path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns1/deployments.apps/llm/queue_backlog"
	f.backend.set(path, answer{code: 200, body: v1beta2List(v1beta2Value("Deployment", "ns1", "llm", "queue_backlog", "30"))})
	info := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: "queue_backlog"}
	ctx := asAlice()
	b.ResetTimer()
	for b.Loop() {
		if _, err := f.p.GetMetricByName(ctx, types.NamespacedName{Namespace: "ns1", Name: "llm"}, info, labels.Everything()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDirectGET(b *testing.B) {
	fb, files := newFakeBackend(b, backendHost, "localhost")
	path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns1/deployments.apps/llm/queue_backlog"
	fb.set(path, answer{code: 200, body: v1beta2List(v1beta2Value("Deployment", "ns1", "llm", "queue_backlog", "30"))})
	ca, _ := os.ReadFile(files.ca)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(files.cert, files.key)
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}
	url := fb.url("localhost") + path
	b.ResetTimer()
	for b.Loop() {
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

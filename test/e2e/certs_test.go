package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
	pb "github.com/gpuscale/gpuscale/pkg/adapter/kedascaler/externalscaler"
)

// Short enough that the CA changes within the test, long enough that a
// renewal two thirds in has seconds to spare on a loaded machine.
const (
	rotationValidity   = 9 * time.Second
	rotationCAValidity = 27 * time.Second
	rotationRun        = 55 * time.Second
	// trustReload is how often the test's clients re-read the bundle: a
	// peer that reloads within a sixth of the CA's life never fails.
	trustReload = 2 * time.Second
)

// TestRuntimeCertificateRotation runs the adapter with --certs-secret and
// certificates valid for seconds, and keeps reading through the
// aggregator, straight over HTTPS and through the KEDA scaler port (with
// the client credentials the adapter keeps for KEDA) while the serving
// certificate is renewed several times and its CA once: not one request
// may fail, and the renewals must have happened.
func TestRuntimeCertificateRotation(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-certs")
	deployment(t, ns, "llm", 1)
	ensureRole(t, devenv.Namespace, "gpuscale-keda-client")
	bindKEDAReader(t, ns)
	apiServices := "v1beta2.custom.metrics.k8s.io,v1beta1.custom.metrics.k8s.io,v1beta1.external.metrics.k8s.io"
	if err := env.StopAdapter(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restoreSuiteAdapter(t) })
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	scalerPort := ports[0]
	if err := env.StartAdapterWith(ctx, []string{"--scrape-interval=" + scrapeInterval.String(), "--max-staleness=" + maxStaleness.String(),
		"--ttft-window=" + ttftWindow.String(), "--v=2",
		"--certs-secret=gpuscale-adapter-certs", "--certs-namespace=" + devenv.Namespace, "--certs-service=" + devenv.AdapterName,
		"--certs-apiservices=" + apiServices, "--cert-validity=" + rotationValidity.String(), "--ca-validity=" + rotationCAValidity.String(),
		"--keda-scaler-port=" + strconv.Itoa(scalerPort), "--keda-scaler-bind-address=127.0.0.1",
		"--keda-scaler-client-secret=" + devenv.Namespace + "/gpuscale-keda-client"}); err != nil {
		t.Fatal(err)
	}
	path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/pods/*/inference_queue_depth"
	testenv.WaitFor(t, 60*time.Second, "a value through the aggregator", func(ctx context.Context) (bool, error) {
		l, err := customList(ctx, path)
		return err == nil && len(l.Items) == 1, nil
	})

	var (
		mu       sync.Mutex
		failures []string
		leaves   = map[string]bool{}
		cas      = map[string]bool{}
		calls    atomic.Int64
	)
	fail := func(who string, err error) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf("%s at %s: %v", who, time.Now().Format("15:04:05.000"), err))
	}
	runCtx, stop := context.WithTimeout(ctx, rotationRun)
	defer stop()
	var wg sync.WaitGroup
	every := func(d time.Duration, f func()) {
		wg.Go(func() {
			tick := time.NewTicker(d)
			defer tick.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-tick.C:
					f()
					calls.Add(1)
				}
			}
		})
	}
	// The HPA's path: the aggregator, trusting the APIServices' caBundle.
	// Its own client, unthrottled: the suite's shared one allows 5 requests
	// a second, and a wait in its rate limiter that would outlast the run
	// is an error of the client's, not a failed request of the adapter's.
	aggregator := unthrottledClient(t)
	every(100*time.Millisecond, func() {
		b, err := aggregator.Get().RequestURI(path).DoRaw(runCtx)
		if runCtx.Err() != nil {
			return
		}
		var l cmv1beta2.MetricValueList
		if err == nil {
			err = json.Unmarshal(b, &l)
		}
		switch {
		case err != nil:
			fail("aggregator", err)
		case len(l.Items) != 1:
			fail("aggregator", fmt.Errorf("%d items, want 1", len(l.Items)))
		}
	})
	// A new handshake each time, trusting what the adapter published.
	creds := newTrust(t)
	every(100*time.Millisecond, func() {
		pool, _ := creds.get()
		cfg := &tls.Config{RootCAs: pool, ServerName: devenv.AdapterName + "." + devenv.Namespace + ".svc", MinVersion: tls.VersionTLS12}
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
		resp, err := client.Get(env.AdapterURL() + "/readyz")
		if err != nil {
			if runCtx.Err() == nil {
				fail("https", err)
			}
			return
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fail("https", fmt.Errorf("/readyz: %s", resp.Status))
		}
		leaf := resp.TLS.PeerCertificates[0]
		mu.Lock()
		leaves[string(leaf.Raw)], cas[string(leaf.RawIssuer)] = true, true
		mu.Unlock()
	})
	// KEDA's operator: a new connection each time, with the Secret the
	// adapter keeps for it.
	ref := &pb.ScaledObjectRef{Name: "llm", Namespace: ns, ScalerMetadata: map[string]string{
		"signal": "inference_queue_depth", "model": "model-llm", "target": "4"}}
	every(200*time.Millisecond, func() {
		pool, cert := creds.get()
		cfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: devenv.AdapterName + "." + devenv.Namespace + ".svc", MinVersion: tls.VersionTLS12}
		conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(scalerPort), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			fail("keda", err)
			return
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
		defer cancel()
		if _, err := pb.NewExternalScalerClient(conn).IsActive(cctx, ref); err != nil && runCtx.Err() == nil {
			fail("keda", err)
		}
	})
	wg.Go(func() { creds.reload(runCtx, t) })
	wg.Wait()

	t.Logf("FIGURE certificate rotation: %d requests over %v, %d serving certificates, %d CAs, %d failures",
		calls.Load(), rotationRun, len(leaves), len(cas), len(failures))
	for _, f := range failures {
		t.Error(f)
	}
	// Renewed two thirds in: a leaf every 6 s, and the CA after 22.5 s.
	if len(leaves) < 5 || len(cas) < 2 {
		t.Errorf("%d serving certificates from %d CAs over %v: the rotation did not happen", len(leaves), len(cas), rotationRun)
	}
}

// trust is what the test's clients trust and present, re-read from the
// Secret the adapter keeps for KEDA (ca.crt: the serving bundle).
type trust struct {
	mu   sync.Mutex
	pool *x509.CertPool
	cert tls.Certificate
}

func newTrust(t *testing.T) *trust {
	tr := &trust{}
	if err := tr.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tr
}

func (tr *trust) get() (*x509.CertPool, tls.Certificate) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.pool, tr.cert
}

func (tr *trust) load(ctx context.Context) error {
	s, err := env.Cluster.Client().CoreV1().Secrets(devenv.Namespace).Get(ctx, "gpuscale-keda-client", metav1.GetOptions{})
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
		return fmt.Errorf("KEDA's Secret holds no CA")
	}
	cert, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		return err
	}
	tr.mu.Lock()
	tr.pool, tr.cert = pool, cert
	tr.mu.Unlock()
	return nil
}

func (tr *trust) reload(ctx context.Context, t *testing.T) {
	tick := time.NewTicker(trustReload)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := tr.load(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("re-reading KEDA's Secret: %v", err)
			}
		}
	}
}

// restoreSuiteAdapter puts the suite's adapter back: the cluster CA in the
// APIServices (the runtime one wrote its own) and the suite's flags.
func restoreSuiteAdapter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := env.StopAdapter(); err != nil {
		t.Error(err)
	}
	_, _, caPEM, err := env.Cluster.ServingCerts(devenv.AdapterName + "." + devenv.Namespace + ".svc")
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"spec":{"caBundle":%q}}`, base64.StdEncoding.EncodeToString(caPEM))
	for _, name := range []string{"v1beta2.custom.metrics.k8s.io", "v1beta1.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io"} {
		if out, err := env.Cluster.Kubectl(ctx, "patch", "apiservice", name, "--type=merge", "-p", patch); err != nil {
			t.Errorf("restore %s: %v: %s", name, err, out)
		}
	}
	_ = env.Cluster.Client().CoreV1().Secrets(devenv.Namespace).Delete(ctx, "gpuscale-adapter-certs", metav1.DeleteOptions{})
	if err := env.StartAdapter(ctx); err != nil {
		t.Fatalf("restart the suite's adapter: %v", err)
	}
}

// unthrottledClient is a REST client of the suite's cluster admin without
// client-side rate limiting, for loops whose every request is judged.
func unthrottledClient(t *testing.T) rest.Interface {
	t.Helper()
	cfg := env.Cluster.RESTConfig()
	cfg.QPS = -1
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c.Discovery().RESTClient()
}

// bindKEDAReader lets the user of the client certificate the adapter keeps
// for KEDA (keda-operator) read the metrics APIs in ns: the scaler port
// authorizes every read as those APIs would (docs/keda.md), and the chart
// binds that user cluster-wide.
func bindKEDAReader(t *testing.T, ns string) {
	t.Helper()
	manifest := []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: e2e-keda-scaler-reader, namespace: ` + ns + `}
rules:
  - {apiGroups: [custom.metrics.k8s.io, external.metrics.k8s.io], resources: ["*"], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: e2e-keda-scaler-reader, namespace: ` + ns + `}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: e2e-keda-scaler-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: keda-operator}]
`)
	kubectlStdin(t, manifest, "apply", "-f", "-")
}

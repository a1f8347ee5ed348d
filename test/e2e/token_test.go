package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// TestExporterTokenSecret: the adapter makes the exporters' reserved-lane
// token at runtime with exactly the rights deploy/manifests give it
// (10-adapter-rbac.yaml), as the chart's default does, and runs as usual
// whatever becomes of it:
//   - no Secret: the adapter creates it (32 random bytes, labelled as its
//     own) and serves the metrics APIs meanwhile, its token file (the
//     optional volume) still empty;
//   - the Secret projected into the file: the adapter holds the token;
//   - a Secret of the user's: restarted over it, the adapter reads it and
//     never writes it;
//   - a namespace where it may not create it: logged, counted, and the
//     metrics APIs answer all the same.
func TestExporterTokenSecret(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-exporter-token")
	deployment(t, ns, "llm", 1)
	const name = "gpuscale-exporter-token"
	secrets := env.Cluster.Client().CoreV1().Secrets(devenv.Namespace)
	if err := secrets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secrets.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	// The token's volume, mounted but empty until the kubelet projects
	// the Secret.
	volume := filepath.Join(t.TempDir(), "exporter-token")
	if err := os.Mkdir(volume, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := env.StopAdapter(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := env.StopAdapter(); err != nil {
			t.Error(err)
		}
		if err := env.StartAdapter(ctx); err != nil {
			t.Fatalf("restart the suite's adapter: %v", err)
		}
	})
	start := func(secret string) {
		t.Helper()
		if err := env.StopAdapter(); err != nil {
			t.Fatal(err)
		}
		if err := env.StartAdapterWith(ctx, []string{"--scrape-interval=" + scrapeInterval.String(), "--max-staleness=" + maxStaleness.String(),
			"--ttft-window=" + ttftWindow.String(), "--v=2",
			"--exporter-token-file=" + filepath.Join(volume, "token"), "--exporter-token-secret=" + secret}); err != nil {
			t.Fatal(err)
		}
	}
	path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/pods/*/inference_queue_depth"
	serves := func(what string) {
		t.Helper()
		testenv.WaitFor(t, 60*time.Second, what, func(ctx context.Context) (bool, error) {
			l, err := customList(ctx, path)
			return err == nil && len(l.Items) == 1, nil
		})
	}
	series := func(what, series string, want func(float64) bool) {
		t.Helper()
		testenv.WaitFor(t, 60*time.Second, what, func(ctx context.Context) (bool, error) {
			body, err := env.AdapterGet(ctx, "/metrics")
			if err != nil {
				return false, nil
			}
			v, ok := sample(body, series)
			return ok && want(v), nil
		})
	}
	one := func(v float64) bool { return v == 1 }

	// No Secret: made at runtime; the APIs answer without a token.
	start(devenv.Namespace + "/" + name)
	var made *corev1.Secret
	testenv.WaitFor(t, 60*time.Second, "the adapter's token Secret", func(ctx context.Context) (bool, error) {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		made = s
		return err == nil, nil
	})
	tok := made.Data["token"]
	if raw, err := base64.RawURLEncoding.DecodeString(string(tok)); err != nil || len(raw) < 32 {
		t.Errorf("token %q: %d random bytes (%v), want 32 or more", tok, len(raw), err)
	}
	if made.Labels["app.kubernetes.io/managed-by"] != "gpuscale-adapter" {
		t.Errorf("the token Secret's labels %v do not say the adapter made it", made.Labels)
	}
	serves("values through the aggregator, no token file yet")
	series("no token held yet", "gpuscale_adapter_exporter_token_loaded", func(v float64) bool { return v == 0 })

	// The kubelet projects it: the adapter takes the token up.
	tmp := filepath.Join(volume, "..data_tmp")
	if err := os.WriteFile(tmp, tok, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(volume, "token")); err != nil {
		t.Fatal(err)
	}
	series("the projected token held", "gpuscale_adapter_exporter_token_loaded", one)

	// A Secret of the user's: read, never written.
	if err := secrets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	mine, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
		Data: map[string][]byte{"token": []byte("a-token-of-the-users-own-0123")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start(devenv.Namespace + "/" + name)
	series("the user's Secret found", "gpuscale_adapter_exporter_token_secret_ready", one)
	got, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != mine.ResourceVersion || string(got.Data["token"]) != "a-token-of-the-users-own-0123" {
		t.Errorf("the user's Secret was written: resourceVersion %s -> %s, token %q", mine.ResourceVersion, got.ResourceVersion, got.Data["token"])
	}

	// Nowhere to make it: counted, retried, and nothing else affected.
	start(ns + "/" + name)
	series("the refusal counted", `gpuscale_adapter_exporter_token_secret_errors_total{reason="get"}`, func(v float64) bool { return v >= 1 })
	series("not ready", "gpuscale_adapter_exporter_token_secret_ready", func(v float64) bool { return v == 0 })
	serves("values through the aggregator, the token Secret refused")
	if _, err := env.Cluster.Client().CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a token Secret in %s, where the adapter may not create one: %v", ns, err)
	}
}

// sample is the value of one series (name and labels as exposed) in a
// text exposition.
func sample(exposition []byte, series string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(exposition))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), series+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		return v, err == nil
	}
	return 0, false
}

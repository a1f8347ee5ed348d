package containers

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// TestVersion: every image's entrypoint answers --version with the version
// `make images` stamped in.
func TestVersion(t *testing.T) {
	needEnv(t)
	for _, name := range []string{"adapter", "exporter", "inferencesim"} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := podman(ctx, "run", "--rm", "--pull=never", "--network=none", "--read-only", "--cap-drop=ALL",
				"localhost/gpuscale-"+name+":"+tag, "--version")
			if err != nil {
				t.Fatal(err)
			}
			if want := name + ", version " + tag + " "; !strings.HasPrefix(string(out), want) {
				t.Errorf("--version printed %q, want it to start with %q", out, want)
			}
		})
	}
}

// TestExporterImage runs the chart's exporter DaemonSet container (the
// simulated backend) and checks its probes and /metrics.
func TestExporterImage(t *testing.T) {
	needEnv(t)
	// The simulated backend: there is no GPU here.
	objs := renderChart(t, "exporter.config.backend=sim")
	ds := daemonSet(t, objs, "gpuscale-exporter")
	pod := ds.Spec.Template.Spec
	c := container(t, pod, "exporter")

	// Deviation: the chart listens on every interface of the pod's own
	// network; on this shared host network the test listens on loopback,
	// on a free port (the probes follow it below).
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	port := ports[0]
	c.Args = replaceArg(t, c.Args, "--web.listen-address=", "--web.listen-address=127.0.0.1:"+strconv.Itoa(port))
	// Deviation: no kubelet runs here, so the pod-resources hostPath is an
	// empty directory: the exporter serves GPUs without pod attribution
	// and counts the failures (checked below).
	podResources := filepath.Join(t.TempDir(), "pod-resources")
	mkdir(t, podResources, 0o755)
	// The reserved lane's token: the Secret the adapter makes at runtime,
	// as the kubelet would have projected it.
	token := map[string]map[string][]byte{"gpuscale-exporter-token": {"token": []byte("test-reserved-lane-token")}}
	startContainer(t, runSpec{
		name: "gpuscale-test-exporter", pod: pod, c: c,
		volumes:   volumeDirs(t, pod, token, map[string]string{"/var/lib/kubelet/pod-resources": podResources}),
		fieldRefs: map[string]string{"spec.nodeName": "gpu-node-1"},
	})

	base := "http://127.0.0.1:" + strconv.Itoa(port)
	mapPort := func(p int32) string {
		if want := containerPortNamed(t, c, "metrics"); p != want {
			t.Fatalf("probe on port %d, the exporter listens on %d", p, want)
		}
		return base
	}
	for _, probe := range []struct {
		kind string
		p    *corev1.Probe
	}{{"readiness", c.ReadinessProbe}, {"liveness", c.LivenessProbe}} {
		if probe.p == nil || probe.p.HTTPGet == nil {
			t.Fatalf("the rendered exporter has no HTTP %s probe", probe.kind)
		}
		p, err := containerPort(c, *probe.p.HTTPGet)
		if err != nil {
			t.Fatal(err)
		}
		url := mapPort(p) + probe.p.HTTPGet.Path
		poll(t, 60*time.Second, probe.kind+" probe "+url, func() error {
			if s := containerState("gpuscale-test-exporter"); !strings.HasPrefix(s, "running") {
				t.Fatalf("the exporter container is %s", s)
			}
			return get200(http.DefaultClient, url)
		})
	}

	var mfs map[string]*dto.MetricFamily
	poll(t, 30*time.Second, "GPU metrics on /metrics", func() error {
		body, err := getBody(http.DefaultClient, base+"/metrics")
		if err != nil {
			return err
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		if mfs, err = p.TextToMetricFamilies(strings.NewReader(body)); err != nil {
			return err
		}
		if n := len(mfs["DCGM_FI_DEV_GPU_UTIL"].GetMetric()); n != 8 {
			return fmt.Errorf("%d DCGM_FI_DEV_GPU_UTIL series, want 8", n)
		}
		if f := mfs["gpuscale_exporter_podresources_failures_total"]; f == nil || f.GetMetric()[0].GetCounter().GetValue() == 0 {
			return fmt.Errorf("no pod-resources failure counted without a kubelet")
		}
		return nil
	})
	checkBuildInfo(t, mfs)

	// Resident memory once it has collected and served for a while, as
	// Prometheus and the adapter would have it: 20 scrapes over 10 s.
	for range 20 {
		if _, err := getBody(http.DefaultClient, base+"/metrics"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	rss := vmRSS(t, containerPID(t, "gpuscale-test-exporter"))
	t.Logf("FIGURE exporter RSS in its container (sim backend, 8 GPUs): %.1f MiB", float64(rss)/(1<<20))
	if limit := c.Resources.Limits.Memory(); !limit.IsZero() && rss > limit.Value() {
		t.Errorf("exporter RSS %d bytes is over the chart's memory limit %s", rss, limit)
	}
}

// TestAdapterImage runs the chart's adapter Deployment container with
// in-cluster credentials against the local control plane, whose
// aggregator reaches it through the APIServices, and reads metrics
// through the kube-apiserver with kubectl.
func TestAdapterImage(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	// The environment's exporter DaemonSet is labelled by name only (no
	// app.kubernetes.io/instance); the selector is a chart value.
	values := []string{"adapter.config.exporterSelector=app.kubernetes.io/name=" + devenv.ExporterName}
	// An environment moved off the default port (devenv.AdapterPortEnv)
	// registers the adapter on its own port: the chart's port follows.
	port := env.AdapterServicePort()
	if port != devenv.AdapterPort {
		values = append(values, "adapter.securePort="+strconv.Itoa(port))
	}
	objs := renderChart(t, values...)
	d := deployment(t, objs, "gpuscale-adapter")
	pod := d.Spec.Template.Spec
	c := container(t, pod, "adapter")

	// The APIServices send the aggregator to the Service port, which
	// reaches the adapter's --secure-port; the environment's Service
	// resolves to loopback on the same port.
	if !contains(c.Args, "--secure-port="+strconv.Itoa(port)) {
		t.Fatalf("the rendered adapter args %q do not serve on the APIService port %d", c.Args, port)
	}
	// Deviation: on the shared host network the adapter binds loopback
	// only (the chart's pod binds every interface of its own network).
	c.Args = append(c.Args, "--bind-address=127.0.0.1")

	// The chart's adapter keeps its own certificate (--certs-secret): it
	// creates the Secret, and writes its CA into the environment's
	// APIServices, as in a cluster; no Secret is mounted.
	if !contains(c.Args, "--certs-secret=gpuscale-adapter-certs") {
		t.Fatalf("the rendered adapter args %q do not keep the certificate at runtime", c.Args)
	}
	secrets := map[string]map[string][]byte{}
	// The exporters' reserved-lane token, as the kubelet projects the
	// Secret once the adapter has made it; the environment's exporters
	// have no lane and ignore it.
	secrets["gpuscale-exporter-token"] = map[string][]byte{"token": []byte("test-reserved-lane-token")}

	// What the kubelet gives every pod whose token is automounted: the
	// ServiceAccount's token, the cluster CA and the namespace, and the
	// API server's address in the environment.
	kubelet := map[string]string{}
	inCluster := map[string]string{}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		sa := serviceAccountDir(ctx, t)
		kubelet["/var/run/secrets/kubernetes.io/serviceaccount"] = sa
		host, port, err := net.SplitHostPort(strings.TrimPrefix(env.Cluster.RESTConfig().Host, "https://"))
		if err != nil {
			t.Fatal(err)
		}
		inCluster["KUBERNETES_SERVICE_HOST"], inCluster["KUBERNETES_SERVICE_PORT"] = host, port
	}
	if pod.ServiceAccountName != devenv.AdapterName {
		t.Fatalf("the adapter runs as ServiceAccount %q; the environment's RBAC is for %s", pod.ServiceAccountName, devenv.AdapterName)
	}
	startContainer(t, runSpec{
		name: "gpuscale-test-adapter", pod: pod, c: c,
		volumes: volumeDirs(t, pod, secrets, nil),
		env:     inCluster, kubeletMounts: kubelet,
	})

	// A container that exits fails the test at once, not after the wait.
	poll(t, 90*time.Second, "metrics APIs through the aggregator", func() error {
		if s := containerState("gpuscale-test-adapter"); !strings.HasPrefix(s, "running") {
			t.Fatalf("the adapter container is %s", s)
		}
		return env.WaitAPIAvailable(ctx, 2*time.Second)
	})

	// The kubelet probes HTTPS without verifying the certificate.
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Fatal("the rendered adapter lacks an HTTP probe")
		}
		p, err := containerPort(c, *probe.HTTPGet)
		if err != nil {
			t.Fatal(err)
		}
		if p != int32(port) || probe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Fatalf("probe %s on %s port %d; the adapter serves HTTPS on %d", probe.HTTPGet.Path, probe.HTTPGet.Scheme, p, port)
		}
		poll(t, 30*time.Second, "probe "+probe.HTTPGet.Path, func() error { return get200(insecure, base+probe.HTTPGet.Path) })
	}

	// Values through the kube-apiserver's aggregation layer, as kubectl
	// and the HPA controller read them.
	ns := "images"
	if _, err := env.Cluster.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Cluster.Client().AppsV1().Deployments(ns).Create(ctx, devenv.InferenceDeployment(ns, "llm", 2, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/pods/*/inference_queue_depth",
		"/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/pods/*/gpu_utilization",
	} {
		poll(t, 90*time.Second, "kubectl get --raw "+path, func() error {
			out, err := env.Cluster.Kubectl(ctx, "get", "--raw", path)
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			var l cmv1beta2.MetricValueList
			if err := json.Unmarshal(out, &l); err != nil {
				return err
			}
			if len(l.Items) != 2 {
				return fmt.Errorf("%d values, want one per pod (2): %s", len(l.Items), out)
			}
			return nil
		})
	}

	// The adapter's own /metrics, as a cluster admin (system:masters,
	// authorized through the kube-apiserver).
	// Verified with the bundle the adapter keeps, for the Service's name.
	certs, err := env.Cluster.Client().CoreV1().Secrets(devenv.Namespace).Get(ctx, "gpuscale-adapter-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := env.Cluster.RESTConfig()
	cfg.Host = base
	cfg.TLSClientConfig.CAData = certs.Data["ca.crt"]
	cfg.TLSClientConfig.ServerName = devenv.AdapterName + "." + devenv.Namespace + ".svc"
	admin, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body, err := getBody(admin, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("adapter /metrics: %v", err)
	}
	checkBuildInfo(t, mfs)
}

// serviceAccountDir holds what the kubelet projects into
// /var/run/secrets/kubernetes.io/serviceaccount.
func serviceAccountDir(ctx context.Context, t *testing.T) string {
	t.Helper()
	token, err := env.AdapterToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "serviceaccount")
	mkdir(t, dir, 0o755)
	for name, b := range map[string][]byte{"token": []byte(token), "ca.crt": env.Cluster.RESTConfig().CAData, "namespace": []byte(devenv.Namespace)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func checkBuildInfo(t *testing.T, mfs map[string]*dto.MetricFamily) {
	t.Helper()
	f := mfs["gpuscale_build_info"]
	if f == nil || len(f.GetMetric()) != 1 {
		t.Fatalf("/metrics has no single gpuscale_build_info series: %v", f)
	}
	for _, l := range f.GetMetric()[0].GetLabel() {
		if l.GetName() == "version" && l.GetValue() == tag {
			return
		}
	}
	t.Errorf("gpuscale_build_info %v does not carry version %q", f.GetMetric()[0].GetLabel(), tag)
}

func containerPortNamed(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %s", c.Name, name)
	return 0
}

func get200(client *http.Client, url string) error {
	_, err := getBody(client, url)
	return err
}

func getBody(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b), nil
}

// vmRSS is a process's resident set size from /proc.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

func contains(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

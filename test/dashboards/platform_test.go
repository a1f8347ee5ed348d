package dashboards

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The chart as platform teams run it (issue #26): GitOps-stable renders,
// monitoring that verifies, the knobs other charts have, refusals of what
// cannot work, and notes that say what to do next.

var production = filepath.Join(chartDir, "ci/production-values.yaml")

// renderRaw is helm template's output, for byte comparisons.
func renderRaw(t *testing.T, args ...string) []byte {
	t.Helper()
	helm, err := helmPath()
	if err != nil {
		t.Fatalf("hack/helm.sh: %v", err)
	}
	var out, stderr bytes.Buffer
	cmd := exec.Command(helm, append([]string{"template", "gs", chartDir, "--namespace", "gpu"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template %v: %v: %s", args, err, stderr.String())
	}
	return out.Bytes()
}

// TestChartRenderIsStable: what Argo CD and Flux render (helm template)
// is the same bytes every time, for default and production values, and
// holds no certificate, key or token: the adapter makes those at runtime
// (its certificates, and the exporters' reserved-lane token).
func TestChartRenderIsStable(t *testing.T) {
	monitoring := []string{"--api-versions", "monitoring.coreos.com/v1"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"production", append([]string{"-f", production}, monitoring...)},
		{"all on", append([]string{"-f", filepath.Join(chartDir, "ci/all-on-values.yaml")}, monitoring...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := renderRaw(t, tc.args...), renderRaw(t, tc.args...)
			if !bytes.Equal(a, b) {
				t.Fatal("two renders of the same values differ")
			}
			if bytes.Contains(a, []byte("BEGIN CERTIFICATE")) || bytes.Contains(a, []byte("PRIVATE KEY")) {
				t.Error("the render holds a certificate or key")
			}
			objs := mustRender(t, tc.args...)
			for _, s := range ofKind(objs, "Secret") {
				// The one Secret a render may hold: a ServiceAccount token
				// Secret, which the API server fills.
				if dig(s, "type") != "kubernetes.io/service-account-token" || dig(s, "data") != nil || dig(s, "stringData") != nil {
					t.Errorf("the render holds Secret %s (type %v) with data", s.name(), dig(s, "type"))
				}
			}
		})
	}
	objs := mustRender(t, append([]string{"-f", production}, monitoring...)...)
	for _, o := range ofKind(objs, "APIService") {
		if dig(o, "spec", "caBundle") != nil || dig(o, "spec", "insecureSkipTLSVerify") != false {
			t.Errorf("APIService %s: caBundle %v, insecureSkipTLSVerify %v; want none (the adapter writes it) and false",
				o.name(), dig(o, "spec", "caBundle"), dig(o, "spec", "insecureSkipTLSVerify"))
		}
	}
	a := args(t, named(t, objs, "Deployment", "-adapter"))
	for _, want := range []string{"--certs-secret=gs-gpuscale-adapter-certs", "--certs-namespace=gpu", "--certs-service=gs-gpuscale-adapter",
		"--certs-apiservices=v1beta2.custom.metrics.k8s.io,v1beta1.custom.metrics.k8s.io,v1beta1.external.metrics.k8s.io",
		"--keda-scaler-client-secret=keda/gs-gpuscale-keda-client", "--logging-format=json"} {
		if !slices.Contains(a, want) {
			t.Errorf("adapter args %v lack %s", a, want)
		}
	}
	if slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--tls-") }) {
		t.Errorf("adapter args %v name certificate files; the adapter keeps its own", a)
	}
	// What the adapter may do with its certificates: its Secret, and the
	// caBundle of the APIServices it registers, by name.
	role := named(t, objs, "ClusterRole", "-adapter:ca-bundle")
	names, _ := dig(dig(role, "rules").([]any)[0], "resourceNames").([]any)
	if len(names) != 3 || !slices.Equal(dig(dig(role, "rules").([]any)[0], "verbs").([]any), []any{"get", "patch"}) {
		t.Errorf("ca-bundle ClusterRole %v, want get and patch on the three APIServices", dig(role, "rules"))
	}
}

// TestChartMonitoringVerifies: the adapter's ServiceMonitor verifies the
// serving CA and authorizes with a Secret of a scraper allowed only
// /metrics, never insecureSkipVerify or bearerTokenFile.
func TestChartMonitoringVerifies(t *testing.T) {
	monitoring := []string{"--api-versions", "monitoring.coreos.com/v1", "--set", "serviceMonitor.enabled=true"}
	for _, tc := range []struct {
		name, caSecret string
		args           []string
	}{
		{"generate", "gs-gpuscale-adapter-certs", nil},
		{"cert-manager", "gs-gpuscale-adapter-tls", []string{"--set", "adapter.tls.source=certManager", "--api-versions", "cert-manager.io/v1"}},
		{"own Secret", "mine", []string{"--set", "adapter.tls.secretName=mine", "--set", "apiService.caBundle=Cg=="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := mustRender(t, append(monitoring, tc.args...)...)
			sm := named(t, objs, "ServiceMonitor", "-adapter")
			ep := dig(sm, "spec", "endpoints").([]any)[0]
			if dig(ep, "bearerTokenFile") != nil || dig(ep, "tlsConfig", "insecureSkipVerify") != nil {
				t.Errorf("endpoint %v uses bearerTokenFile or insecureSkipVerify", ep)
			}
			if got := dig(ep, "tlsConfig", "ca", "secret", "name"); got != tc.caSecret || dig(ep, "tlsConfig", "ca", "secret", "key") != "ca.crt" {
				t.Errorf("tlsConfig.ca %v, want Secret %s key ca.crt", dig(ep, "tlsConfig", "ca"), tc.caSecret)
			}
			if got := dig(ep, "tlsConfig", "serverName"); got != "gs-gpuscale-adapter.gpu.svc" {
				t.Errorf("serverName %v", got)
			}
			scraper := dig(ep, "authorization", "credentials", "name")
			if dig(ep, "authorization", "type") != "Bearer" || scraper != "gs-gpuscale-adapter-metrics-scraper" {
				t.Fatalf("authorization %v", dig(ep, "authorization"))
			}
			secret := named(t, objs, "Secret", "-metrics-scraper")
			if secret["type"] != "kubernetes.io/service-account-token" || dig(secret, "metadata", "annotations", "kubernetes.io/service-account.name") != scraper {
				t.Errorf("scraper Secret %v", secret)
			}
			rules := dig(named(t, objs, "ClusterRole", "-metrics-scraper"), "rules").([]any)
			if len(rules) != 1 || !slices.Equal(dig(rules[0], "nonResourceURLs").([]any), []any{"/metrics"}) || !slices.Equal(dig(rules[0], "verbs").([]any), []any{"get"}) {
				t.Errorf("scraper may %v; want get on /metrics only", rules)
			}
		})
	}
	if _, err := render(t, append(monitoring, "--set", "adapter.tls.source=selfSigned", "--set", "apiService.insecureSkipTLSVerify=true")...); err == nil ||
		!strings.Contains(err.Error(), "serviceMonitor.adapterTLSConfig") {
		t.Errorf("a self-signed adapter's ServiceMonitor rendered without being told how to trust it: %v", err)
	}
}

// TestChartKnobs: the values other charts have, and what each renders.
func TestChartKnobs(t *testing.T) {
	monitoring := []string{"--api-versions", "monitoring.coreos.com/v1"}
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, objs []object)
	}{
		{"hostNetwork", []string{"--set", "adapter.hostNetwork=true", "--set", "adapter.securePort=4443"}, func(t *testing.T, objs []object) {
			spec := dig(named(t, objs, "Deployment", "-adapter"), "spec", "template", "spec")
			if dig(spec, "hostNetwork") != true || dig(spec, "dnsPolicy") != "ClusterFirstWithHostNet" {
				t.Errorf("hostNetwork %v dnsPolicy %v", dig(spec, "hostNetwork"), dig(spec, "dnsPolicy"))
			}
		}},
		{"dnsPolicy", []string{"--set", "adapter.dnsPolicy=Default"}, func(t *testing.T, objs []object) {
			if got := dig(named(t, objs, "Deployment", "-adapter"), "spec", "template", "spec", "dnsPolicy"); got != "Default" {
				t.Errorf("dnsPolicy %v", got)
			}
		}},
		{"probe overrides", []string{"--set", "adapter.livenessProbe.periodSeconds=20", "--set", "adapter.readinessProbe.enabled=false",
			"--set", "adapter.startupProbe.failureThreshold=60", "--set", "exporter.readinessProbe.timeoutSeconds=3"}, func(t *testing.T, objs []object) {
			c := container(t, named(t, objs, "Deployment", "-adapter"))
			if dig(c, "livenessProbe", "periodSeconds") != 20 || dig(c, "livenessProbe", "httpGet", "path") != "/livez" {
				t.Errorf("liveness %v: want the override merged over GET /livez", c["livenessProbe"])
			}
			if c["readinessProbe"] != nil {
				t.Errorf("readiness %v, want none", c["readinessProbe"])
			}
			if dig(c, "startupProbe", "failureThreshold") != 60 || dig(c, "startupProbe", "httpGet", "path") != "/livez" {
				t.Errorf("startup %v", c["startupProbe"])
			}
			e := container(t, named(t, objs, "DaemonSet", "-exporter"))
			if dig(e, "readinessProbe", "timeoutSeconds") != 3 || dig(e, "readinessProbe", "httpGet", "path") != "/readyz" {
				t.Errorf("exporter readiness %v", e["readinessProbe"])
			}
		}},
		{"strategy", []string{"--set", "adapter.strategy.rollingUpdate.maxUnavailable=0"}, func(t *testing.T, objs []object) {
			if got := dig(named(t, objs, "Deployment", "-adapter"), "spec", "strategy", "rollingUpdate", "maxUnavailable"); got != 0 {
				t.Errorf("strategy maxUnavailable %v", got)
			}
		}},
		{"namespaceOverride", append([]string{"--set", "namespaceOverride=gpu-system", "-f", production}, monitoring...), func(t *testing.T, objs []object) {
			for _, o := range objs {
				ns, _ := dig(o, "metadata", "namespace").(string)
				switch {
				case ns == "" || ns == "gpu-system":
				case ns == "keda" && strings.HasSuffix(o.name(), ":keda-client"):
				case ns == "kube-system" && strings.HasSuffix(o.name(), ":extension-apiserver-authentication-reader"):
				default:
					t.Errorf("%s %s in namespace %s", o.kind(), o.name(), ns)
				}
			}
			for _, a := range args(t, named(t, objs, "Deployment", "-adapter")) {
				if strings.Contains(a, "=gpu,") || strings.HasSuffix(a, "=gpu") {
					t.Errorf("adapter arg %s names the release namespace", a)
				}
			}
		}},
		{"relabelings", append([]string{"--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true",
			"--set", "serviceMonitor.relabelings[0].targetLabel=cluster", "--set", "serviceMonitor.relabelings[0].replacement=prod",
			"--set", "serviceMonitor.metricRelabelings[0].action=drop", "--set", "serviceMonitor.metricRelabelings[0].regex=go_.*",
			"--set", "podMonitor.metricRelabelings[0].action=drop", "--set", "podMonitor.metricRelabelings[0].regex=vllm:.*bucket"}, monitoring...),
			func(t *testing.T, objs []object) {
				for _, sm := range ofKind(objs, "ServiceMonitor") {
					ep := dig(sm, "spec", "endpoints").([]any)[0]
					rl, _ := dig(ep, "relabelings").([]any)
					if len(rl) == 0 || dig(rl[len(rl)-1], "targetLabel") != "cluster" {
						t.Errorf("%s relabelings %v lack the value's", sm.name(), rl)
					}
					if mr, _ := dig(ep, "metricRelabelings").([]any); len(mr) != 1 || dig(mr[0], "regex") != "go_.*" {
						t.Errorf("%s metricRelabelings %v", sm.name(), mr)
					}
				}
				ep := dig(named(t, objs, "PodMonitor", "-inference"), "spec", "podMetricsEndpoints").([]any)[0]
				if mr, _ := dig(ep, "metricRelabelings").([]any); len(mr) != 1 {
					t.Errorf("PodMonitor metricRelabelings %v", mr)
				}
			}},
		{"alert toggles and runbooks", append([]string{"--set", "prometheusRule.enabled=true", "--set", "prometheusRule.disabled.GPUScaleXIDErrors=true",
			"--set", "prometheusRule.runbookUrl=https://runbooks.example.com/gpuscale/", "--set", "prometheusRule.additionalLabels.team=ml"}, monitoring...),
			func(t *testing.T, objs []object) {
				var alerts []string
				for _, g := range dig(named(t, objs, "PrometheusRule", "gs-gpuscale"), "spec", "groups").([]any) {
					for _, r := range dig(g, "rules").([]any) {
						name := dig(r, "alert").(string)
						alerts = append(alerts, name)
						if got := dig(r, "annotations", "runbook_url"); got != "https://runbooks.example.com/gpuscale/"+strings.ToLower(name) {
							t.Errorf("%s runbook_url %v", name, got)
						}
						if dig(r, "labels", "team") != "ml" || dig(r, "labels", "severity") == nil {
							t.Errorf("%s labels %v: want team added beside severity", name, dig(r, "labels"))
						}
					}
				}
				if slices.Contains(alerts, "GPUScaleXIDErrors") || !slices.Contains(alerts, "GPUScaleGPUFatalXID") || len(alerts) < 10 {
					t.Errorf("alerts %v: want all but GPUScaleXIDErrors", alerts)
				}
			}},
		{"image digest and registry", []string{"--set", "global.imageRegistry=mirror.example.com:5000",
			"--set", "adapter.image.digest=sha256:" + strings.Repeat("a", 64)}, func(t *testing.T, objs []object) {
			if got := container(t, named(t, objs, "Deployment", "-adapter"))["image"]; got != "mirror.example.com:5000/gpuscale/gpuscale-adapter:0.1.0@sha256:"+strings.Repeat("a", 64) {
				t.Errorf("adapter image %v", got)
			}
			if got := container(t, named(t, objs, "DaemonSet", "-exporter"))["image"]; got != "mirror.example.com:5000/gpuscale/gpuscale-exporter:0.1.0" {
				t.Errorf("exporter image %v", got)
			}
		}},
		{"KEDA credentials for every namespace", []string{"--api-versions", "keda.sh/v1alpha1", "--set", "kedaScaler.enabled=true",
			"--set", "kedaScaler.clusterTriggerAuthentication.enabled=true"}, func(t *testing.T, objs []object) {
			cta := named(t, objs, "ClusterTriggerAuthentication", "gpuscale")
			refs := map[string]string{}
			for _, r := range dig(cta, "spec", "secretTargetRef").([]any) {
				if dig(r, "name") != "gs-gpuscale-keda-client" {
					t.Errorf("secretTargetRef %v reads another Secret than the adapter keeps", r)
				}
				refs[dig(r, "parameter").(string)] = dig(r, "key").(string)
			}
			if refs["caCert"] != "ca.crt" || refs["tlsClientCert"] != "tls.crt" || refs["tlsClientKey"] != "tls.key" {
				t.Errorf("secretTargetRef %v", refs)
			}
			role := named(t, objs, "Role", ":keda-client")
			if dig(role, "metadata", "namespace") != "keda" {
				t.Errorf("KEDA's Secret's Role in %v", dig(role, "metadata", "namespace"))
			}
			svc := named(t, objs, "Service", "-adapter")
			var scaler bool
			for _, p := range dig(svc, "spec", "ports").([]any) {
				scaler = scaler || dig(p, "name") == "keda-scaler" && dig(p, "port") == 6000
			}
			if !scaler {
				t.Error("the Service has no keda-scaler port 6000 for the scalerAddress")
			}
		}},
		{"cert-manager without the KEDA scaler", []string{"--set", "adapter.tls.source=certManager", "--api-versions", "cert-manager.io/v1"}, func(t *testing.T, objs []object) {
			if n := len(ofKind(objs, "Certificate")); n != 2 {
				t.Errorf("%d Certificates, want the CA and the serving certificate", n)
			}
		}},
		{"cert-manager with the KEDA scaler", []string{"--set", "adapter.tls.source=certManager", "--api-versions", "cert-manager.io/v1", "--set", "kedaScaler.enabled=true"},
			func(t *testing.T, objs []object) {
				c := named(t, objs, "Certificate", "-keda-client")
				if u, _ := dig(c, "spec", "usages").([]any); !slices.Contains(u, any("client auth")) || dig(c, "spec", "issuerRef", "name") != "gs-gpuscale-adapter-ca" {
					t.Errorf("KEDA's Certificate %v: want client auth from the release's CA", dig(c, "spec"))
				}
				if a := args(t, named(t, objs, "Deployment", "-adapter")); !slices.Contains(a, "--keda-scaler-client-ca-file=/etc/gpuscale/tls/ca.crt") {
					t.Errorf("adapter args %v: the scaler must trust the release's CA for clients", a)
				}
			}},
		{"default images", nil, func(t *testing.T, objs []object) {
			if got := container(t, named(t, objs, "Deployment", "-adapter"))["image"]; got != "ghcr.io/gpuscale/gpuscale-adapter:0.1.0" {
				t.Errorf("adapter image %v", got)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, mustRender(t, tc.args...)) })
	}
}

// TestChartRefuses: combinations that cannot work fail the render with
// what to do.
func TestChartRefuses(t *testing.T) {
	promql := []string{"--set", "adapter.source=prometheus", "--set", "adapter.prometheus.url=http://p:9090"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"PromQL source behind a NetworkPolicy that admits no Prometheus", append(promql, "--set", "networkPolicy.enabled=true"), "networkPolicy.exporter.from"},
		{"an image digest that is not one", []string{"--set", "adapter.image.digest=latest"}, "/adapter/image/digest"},
		{"insecure APIService with a verifiable certificate", []string{"--set", "apiService.insecureSkipTLSVerify=true"}, "only for adapter.tls.source=selfSigned"},
		{"KEDA scaler with your certificate and no client CA", []string{"--set", "kedaScaler.enabled=true", "--set", "adapter.tls.secretName=mine", "--set", "apiService.caBundle=Cg=="}, "kedaScaler.clientCA.secretName"},
		{"ClusterTriggerAuthentication without KEDA's API", []string{"--set", "kedaScaler.enabled=true", "--set", "kedaScaler.clusterTriggerAuthentication.enabled=true"}, "keda.sh/v1alpha1"},
		{"a Kubernetes older than the chart supports", []string{"--kube-version", "1.24.0"}, "kubeVersion"},
		{"unknown Pod Security level", []string{"--set", "podSecurity.enforce=strict"}, "/podSecurity/enforce"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template %v: %v, want a failure naming %q", tc.args, err, tc.want)
			}
		})
	}
	// With the scrapers named, the exporters admit them and not the
	// adapter, which reads Prometheus.
	objs := mustRender(t, append(promql, "--set", "networkPolicy.enabled=true",
		"--set", "networkPolicy.exporter.from[0].namespaceSelector.matchLabels.name=monitoring")...)
	from := dig(dig(named(t, objs, "NetworkPolicy", "-exporter"), "spec", "ingress").([]any)[0], "from").([]any)
	if len(from) != 1 || dig(from[0], "namespaceSelector") == nil {
		t.Errorf("exporter policy admits %v, want only the named scrapers", from)
	}
}

// TestChartAdmissionPolicyGated: the ValidatingAdmissionPolicy renders
// where Kubernetes serves it (1.30+) and not below, and every kind any
// render holds is served by the oldest Kubernetes Chart.yaml claims.
func TestChartAdmissionPolicyGated(t *testing.T) {
	all := []string{"-f", filepath.Join(chartDir, "ci/all-on-values.yaml"), "--api-versions", "monitoring.coreos.com/v1"}
	if n := len(ofKind(mustRender(t, append(all, "--kube-version", "1.30.0")...), "ValidatingAdmissionPolicy")); n != 1 {
		t.Errorf("Kubernetes 1.30: %d ValidatingAdmissionPolicies, want 1", n)
	}
	chart, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`kubeVersion: ">=1\.(\d+)\.0-0"`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("Chart.yaml has no kubeVersion >=1.N.0-0")
	}
	oldest := "1." + string(m[1]) + ".0"
	// The API groups the oldest claimed version serves GA (and the
	// Prometheus Operator's, which the cluster brings).
	served := map[string]bool{"v1": true, "apps/v1": true, "policy/v1": true, "rbac.authorization.k8s.io/v1": true,
		"apiregistration.k8s.io/v1": true, "networking.k8s.io/v1": true, "monitoring.coreos.com/v1": true}
	for _, o := range mustRender(t, append(all, "--kube-version", oldest)...) {
		if v, _ := o["apiVersion"].(string); !served[v] {
			t.Errorf("Kubernetes %s (Chart.yaml's oldest) does not serve %s %s (%s)", oldest, o.kind(), o.name(), v)
		}
	}
}

// TestChartPodSecurity: the Namespace the chart renders carries the Pod
// Security level its pods need, and on OpenShift the fixed IDs are left to
// the platform.
func TestChartPodSecurity(t *testing.T) {
	level := func(objs []object) any {
		return dig(named(t, objs, "Namespace", "gpu"), "metadata", "labels", "pod-security.kubernetes.io/enforce")
	}
	if got := level(mustRender(t, "--set", "createNamespace=true")); got != "privileged" {
		t.Errorf("with the exporter: enforce %v, want privileged (its host paths fail baseline)", got)
	}
	if got := level(mustRender(t, "--set", "createNamespace=true", "--set", "exporter.enabled=false")); got != "restricted" {
		t.Errorf("adapter only: enforce %v, want restricted", got)
	}
	for _, tc := range []struct {
		name string
		args []string
		uid  bool
	}{
		{"elsewhere", nil, true},
		{"OpenShift", []string{"--api-versions", "security.openshift.io/v1"}, false},
		{"forced", []string{"--set", "global.compatibility.openshift.adaptSecurityContext=force"}, false},
		{"OpenShift, disabled", []string{"--api-versions", "security.openshift.io/v1", "--set", "global.compatibility.openshift.adaptSecurityContext=disabled"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := dig(named(t, mustRender(t, tc.args...), "Deployment", "-adapter"), "spec", "template", "spec")
			if got := dig(spec, "securityContext", "runAsUser") != nil; got != tc.uid {
				t.Errorf("runAsUser set %v, want %v: %v", got, tc.uid, dig(spec, "securityContext"))
			}
			if dig(spec, "securityContext", "runAsNonRoot") != true {
				t.Error("runAsNonRoot dropped")
			}
		})
	}
}

// TestChartReadmeFacts: what the chart README says about a render is
// what renders, and its values table is generated from the schema.
func TestChartReadmeFacts(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| Deployment, Service \(([^)]*)\), ServiceAccount`).FindSubmatch(readme)
	if row == nil {
		t.Fatal("the README's object table has no adapter Deployment row")
	}
	svc := named(t, mustRender(t), "Service", "-adapter")
	port := dig(svc, "spec", "ports").([]any)[0]
	want := "port 6443 to the container's 6443"
	if dig(port, "port") != 6443 || string(row[1]) != want {
		t.Errorf("README says Service (%s), the render has port %v; want %q", row[1], dig(port, "port"), want)
	}
	cmd := exec.Command("go", "run", "./hack/chart-readme", "--check")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
}

// TestREADMEFacts: what the README says about the binaries, `make test`
// and the bench holds.
func TestREADMEFacts(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	dockerfile, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	// Commands in the README run the binaries by the names the images and
	// `make build` give them.
	inCode := false
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if f := strings.Fields(line); inCode && len(f) > 0 && (f[0] == "exporter" || f[0] == "adapter" || f[0] == "inferencesim") {
			t.Errorf("README runs %q, a name no image or build gives the binary", line)
		}
	}
	for _, name := range []string{"adapter", "exporter", "inferencesim"} {
		bin := "gpuscale-" + name
		if !bytes.Contains(dockerfile, []byte(`ENTRYPOINT ["/usr/local/bin/`+bin+`"]`)) {
			t.Errorf("Dockerfile's %s entrypoint is not %s", name, bin)
		}
		if !bytes.Contains(readme, []byte(bin)) {
			t.Errorf("README never names %s", bin)
		}
	}
	if !bytes.Contains(makefile, []byte("-o bin/gpuscale-adapter ")) || !bytes.Contains(makefile, []byte("-o bin/gpuscale-exporter ")) ||
		!bytes.Contains(makefile, []byte("$(VERSION_PKG).Version=$(shell hack/version.sh)")) {
		t.Error("make build does not write bin/gpuscale-<name> with the version stamped (it printed version (devel))")
	}
	// What `make test` needs is said before it is asked for.
	_, after, ok := strings.Cut(string(readme), "Run every test CI runs with `make test`")
	if !ok {
		t.Fatal("README does not introduce make test")
	}
	needs, _, _ := strings.Cut(after, "It runs")
	for _, want := range []string{"root", "podman", "minutes"} {
		if !strings.Contains(needs, want) {
			t.Errorf("README's make test needs do not mention %s:\n%s", want, needs)
		}
	}
	// The bench's static and llm-d policies are not HPAs.
	if strings.Contains(string(readme), "each a real HPA") || !strings.Contains(string(readme), "emulated") {
		t.Error("README calls every bench policy a real HPA; static-peak has none and llm-d's law is emulated")
	}
}

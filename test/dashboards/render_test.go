package dashboards

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The chart's render tests run the pinned helm (hack/helm.sh builds it
// once and caches it, as hack/manifests.sh does in `make unit`) and assert
// on the objects it renders.

var helmPath = sync.OnceValues(func() (string, error) {
	out, err := exec.Command(filepath.Join(repoRoot, "hack/helm.sh")).Output()
	return strings.TrimSpace(string(out)), err
})

// object is one rendered manifest.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }

func (o object) name() string { s, _ := dig(o, "metadata", "name").(string); return s }

// dig walks maps by key, returning nil where the path ends.
func dig(v any, path ...string) any {
	if o, ok := v.(object); ok {
		v = map[string]any(o)
	}
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// render runs helm template with args; err holds helm's output when it
// fails.
func render(t *testing.T, args ...string) ([]object, error) {
	t.Helper()
	helm, err := helmPath()
	if err != nil {
		t.Fatalf("hack/helm.sh: %v", err)
	}
	full := append([]string{"template", "gs", chartDir, "--namespace", "gpu"}, args...)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, full...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, errors.New(stderr.String())
	}
	var objs []object
	dec := yaml.NewDecoder(&stdout)
	for {
		var o map[string]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("helm %v: decode: %v", args, err)
		}
		if o != nil {
			objs = append(objs, object(o))
		}
	}
	return objs, nil
}

func mustRender(t *testing.T, args ...string) []object {
	t.Helper()
	objs, err := render(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v", args, err)
	}
	return objs
}

func ofKind(objs []object, kind string) []object {
	return slices.DeleteFunc(slices.Clone(objs), func(o object) bool { return o.kind() != kind })
}

func named(t *testing.T, objs []object, kind, suffix string) object {
	t.Helper()
	for _, o := range ofKind(objs, kind) {
		if strings.HasSuffix(o.name(), suffix) {
			return o
		}
	}
	t.Fatalf("no %s named *%s rendered", kind, suffix)
	return nil
}

// container returns the first container of a workload's pod template.
func container(t *testing.T, o object) map[string]any {
	t.Helper()
	cs, _ := dig(o, "spec", "template", "spec", "containers").([]any)
	if len(cs) == 0 {
		t.Fatalf("%s %s has no containers", o.kind(), o.name())
	}
	return cs[0].(map[string]any)
}

func args(t *testing.T, o object) []string {
	t.Helper()
	var out []string
	for _, a := range container(t, o)["args"].([]any) {
		out = append(out, a.(string))
	}
	return out
}

// TestChartSchemaRejects: typos, wrong types and contradictory choices fail
// the render with a message naming the value, instead of rendering
// something else (adapter.replicas=two used to render replicas: 0).
func TestChartSchemaRejects(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"replicas not a number", []string{"--set", "adapter.replicas=two"}, "/adapter/replicas"},
		{"replicas zero", []string{"--set", "adapter.replicas=0"}, "/adapter/replicas"},
		{"misspelt key", []string{"--set", "adapter.replicass=2"}, "replicass"},
		{"misspelt top-level key", []string{"--set", "serviceMonitors.enabled=true"}, "serviceMonitors"},
		{"misspelt nested key", []string{"--set", "adapter.config.scrapeIntervall=5s"}, "scrapeIntervall"},
		{"duration without a unit", []string{"--set", "adapter.config.scrapeInterval=5"}, "/adapter/config/scrapeInterval"},
		{"objective not a duration", []string{"--set", "adapter.config.capacityTTFTObjective=fast"}, "/adapter/config/capacityTTFTObjective"},
		{"duration not a duration", []string{"--set", "exporter.config.collectInterval=fast"}, "/exporter/config/collectInterval"},
		{"unknown backend", []string{"--set", "exporter.config.backend=dcgm"}, "/exporter/config/backend"},
		{"port out of range", []string{"--set", "exporter.port=70000"}, "/exporter/port"},
		{"unknown source", []string{"--set", "adapter.source=thanos"}, "/adapter/source"},
		{"boolean as a word", []string{"--set-string", "scaleDown.enabled=yes"}, "/scaleDown/enabled"},
		{"unknown query shape", []string{"--set", "adapter.source=prometheus", "--set", "adapter.prometheus.url=http://p:9090",
			"--set", "adapter.prometheus.queries.pod.gpu_utilization=x"}, "/adapter/prometheus/queries"},
		{"PromQL source without a URL", []string{"--set", "adapter.source=prometheus"}, "needs adapter.prometheus.url"},
		{"namespace selector without the opt-in", []string{"--set", "adapter.config.prometheusAnnotations.namespaceSelector=a=b"},
			"prometheusAnnotations.enabled is false"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template %v: %v, want a failure naming %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestChartRenders: what each value turns into.
func TestChartRenders(t *testing.T) {
	monitoring := []string{"--api-versions", "monitoring.coreos.com/v1"}
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, objs []object)
	}{
		{"defaults", nil, func(t *testing.T, objs []object) {
			ds := named(t, objs, "DaemonSet", "-exporter")
			if got := dig(ds, "spec", "template", "spec", "priorityClassName"); got != "system-node-critical" {
				t.Errorf("exporter priorityClassName %v, want system-node-critical", got)
			}
			for _, a := range args(t, ds) {
				if strings.HasPrefix(a, "--proc-root") || strings.HasPrefix(a, "--container-runtime-socket") {
					t.Errorf("exporter flag %s by default: the host's /proc and CRI socket are mounted only for sharedGPUs", a)
				}
			}
			for _, a := range args(t, named(t, objs, "Deployment", "-adapter")) {
				if strings.Contains(a, "prometheus") {
					t.Errorf("adapter flag %s by default: prometheus.io annotations and the PromQL source are opt-in", a)
				}
			}
			for _, k := range []string{"ConfigMap", "PodMonitor", "ServiceMonitor", "PrometheusRule"} {
				if n := len(ofKind(objs, k)); n > 0 {
					t.Errorf("%d %s rendered by default", n, k)
				}
			}
		}},
		{"shared GPUs", []string{"--set", "exporter.sharedGPUs.enabled=true", "--set", "exporter.sharedGPUs.runtimeSocket=/var/run/crio/crio.sock"}, checkSharedGPUs},
		{"exporter priority class cleared", []string{"--set", "exporter.priorityClassName="}, func(t *testing.T, objs []object) {
			if got := dig(named(t, objs, "DaemonSet", "-exporter"), "spec", "template", "spec", "priorityClassName"); got != nil {
				t.Errorf("priorityClassName %v, want none", got)
			}
		}},
		{"service monitors", append([]string{"--set", "serviceMonitor.enabled=true"}, monitoring...), checkServiceMonitors},
		{"pod monitor", append([]string{"--set", "podMonitor.enabled=true", "--set", "podMonitor.port=metrics"}, monitoring...), checkPodMonitor},
		{"pod monitor without the API", []string{"--set", "podMonitor.enabled=true"}, func(t *testing.T, objs []object) {
			if n := len(ofKind(objs, "PodMonitor")); n != 0 {
				t.Errorf("%d PodMonitors without monitoring.coreos.com/v1", n)
			}
		}},
		{"dashboards", []string{"--set", "dashboards.enabled=true", "--set", "dashboards.folder=GPU", "--set", "dashboards.namespace=monitoring"}, checkDashboards},
		{"prometheus annotations", []string{"--set", "adapter.config.prometheusAnnotations.enabled=true",
			"--set", "adapter.config.prometheusAnnotations.namespaceSelector=team in (ml\\,llm)"}, func(t *testing.T, objs []object) {
			a := args(t, named(t, objs, "Deployment", "-adapter"))
			for _, want := range []string{"--scrape-prometheus-annotations", "--prometheus-annotations-namespace-selector=team in (ml,llm)"} {
				if !slices.Contains(a, want) {
					t.Errorf("adapter args %v lack %s", a, want)
				}
			}
		}},
		{"PromQL source", []string{"--set", "adapter.source=prometheus", "--set", "adapter.prometheus.url=https://prom.monitoring:9090",
			"--set", "adapter.prometheus.timeout=3s", "--set", "adapter.prometheus.scrapeInterval=15s", "--set", "adapter.prometheus.caFile=/etc/prometheus-ca/ca.crt",
			"--set", "adapter.prometheus.namesRefresh=0s",
			"--set", "adapter.prometheus.bearerTokenFile=/var/run/secrets/kubernetes.io/serviceaccount/token",
			"--set-string", `adapter.prometheus.queries.pods.gpu_utilization=avg by (namespace\, pod) (DCGM_FI_DEV_GPU_UTIL{pod=~"{{.PodRegex}}"})`},
			checkPromQLSource},
		{"PromQL source with scale-down", []string{"--set", "adapter.source=prometheus", "--set", "adapter.prometheus.url=http://p:9090",
			"--set", "scaleDown.enabled=true"}, func(t *testing.T, objs []object) {
			// Scale-down reads pod loads through either source.
			a := args(t, named(t, objs, "Deployment", "-adapter"))
			for _, want := range []string{"--source=prometheus", "--scale-down-controller"} {
				if !slices.Contains(a, want) {
					t.Errorf("adapter args %v lack %s", a, want)
				}
			}
			// component-base's flag, not the deprecated --scale-down-lease-namespace.
			if !slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--leader-elect-resource-namespace=") }) {
				t.Errorf("adapter args %v lack --leader-elect-resource-namespace", a)
			}
		}},
		{"extra env and volumes", []string{"-f", filepath.Join(chartDir, "ci/all-on-values.yaml")}, func(t *testing.T, objs []object) {
			dep := named(t, objs, "Deployment", "-adapter")
			c := container(t, dep)
			if env, _ := c["env"].([]any); len(env) != 1 || dig(env[0], "name") != "GODEBUG" {
				t.Errorf("adapter env %v, want the GODEBUG of all-on-values", env)
			}
			if !hasNamed(c["volumeMounts"], "prometheus-ca") || !hasNamed(dig(dep, "spec", "template", "spec", "volumes"), "prometheus-ca") {
				t.Errorf("the extra volume is not both in the pod and mounted: %v", c["volumeMounts"])
			}
			if !hasNamed(c["volumeMounts"], "tls") {
				t.Error("the extra mounts replaced the TLS mount")
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, mustRender(t, tc.args...)) })
	}
}

func hasNamed(list any, name string) bool {
	l, _ := list.([]any)
	return slices.ContainsFunc(l, func(v any) bool { return dig(v, "name") == name })
}

// checkServiceMonitors: the adapter's per-target series keep the target's
// namespace and pod, and both jobs have the fixed names the alert rules use.
func checkServiceMonitors(t *testing.T, objs []object) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-exporter", "-adapter"} {
		sm := named(t, objs, "ServiceMonitor", suffix)
		eps, _ := dig(sm, "spec", "endpoints").([]any)
		if len(eps) != 1 || dig(eps[0], "honorLabels") != true {
			t.Errorf("ServiceMonitor %s: endpoints %v, want one with honorLabels: true", sm.name(), eps)
		}
		// The job label is the Service's value of jobLabel.
		jobLabel, _ := dig(sm, "spec", "jobLabel").(string)
		svc := named(t, objs, "Service", suffix)
		job, _ := dig(svc, "metadata", "labels", jobLabel).(string)
		if job == "" {
			t.Errorf("ServiceMonitor %s: jobLabel %q is not a label of Service %s", sm.name(), jobLabel, svc.name())
			continue
		}
		if !strings.Contains(string(rules), `up{job="`+job+`"}`) {
			t.Errorf("ServiceMonitor %s gives job %q, which no up{job=...} alert names", sm.name(), job)
		}
	}
}

// checkPodMonitor: the inference pods that asked to be scraped, at their
// annotated path, wherever the namespace selector says.
func checkPodMonitor(t *testing.T, objs []object) {
	pm := named(t, objs, "PodMonitor", "-inference")
	if dig(pm, "spec", "namespaceSelector", "any") != true {
		t.Errorf("namespaceSelector %v, want any: true by default", dig(pm, "spec", "namespaceSelector"))
	}
	eps, _ := dig(pm, "spec", "podMetricsEndpoints").([]any)
	if len(eps) != 1 || dig(eps[0], "port") != "metrics" || dig(eps[0], "path") != "/metrics" {
		t.Fatalf("podMetricsEndpoints %v", eps)
	}
	var keep, path bool
	for _, r := range dig(eps[0], "relabelings").([]any) {
		src, _ := dig(r, "sourceLabels").([]any)
		switch {
		case slices.Contains(src, any("__meta_kubernetes_pod_annotation_gpuscale_io_scrape")) && dig(r, "action") == "keep" && dig(r, "regex") == "true":
			keep = true
		case slices.Contains(src, any("__meta_kubernetes_pod_annotation_gpuscale_io_path")) && dig(r, "targetLabel") == "__metrics_path__":
			path = true
		}
	}
	if !keep || !path {
		t.Errorf("relabelings keep annotated pods %v, use their path %v; want both", keep, path)
	}
}

// checkDashboards: one ConfigMap per dashboard, labelled for the sidecar,
// holding the repository's file unchanged.
func checkDashboards(t *testing.T, objs []object) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "dashboards/*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	cms := ofKind(objs, "ConfigMap")
	if len(cms) != len(files) {
		t.Fatalf("%d ConfigMaps, want one per dashboard (%d)", len(cms), len(files))
	}
	for _, f := range files {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(f)
		cm := named(t, cms, "ConfigMap", "-dashboard-"+strings.TrimSuffix(base, ".json"))
		if got := dig(cm, "metadata", "labels", "grafana_dashboard"); got != "1" {
			t.Errorf("%s: label grafana_dashboard %v, want \"1\"", cm.name(), got)
		}
		if got := dig(cm, "metadata", "annotations", "grafana_folder"); got != "GPU" {
			t.Errorf("%s: folder %v", cm.name(), got)
		}
		if got := dig(cm, "metadata", "namespace"); got != "monitoring" {
			t.Errorf("%s: namespace %v", cm.name(), got)
		}
		data, _ := dig(cm, "data", base).(string)
		if !json.Valid([]byte(data)) || strings.TrimSpace(data) != strings.TrimSpace(string(want)) {
			t.Errorf("%s: data[%s] is not dashboards/%s (%d bytes, want %d)", cm.name(), base, base, len(data), len(want))
		}
	}
}

func checkPromQLSource(t *testing.T, objs []object) {
	dep := named(t, objs, "Deployment", "-adapter")
	a := args(t, dep)
	for _, want := range []string{"--source=prometheus", "--prometheus-url=https://prom.monitoring:9090", "--prometheus-timeout=3s",
		"--prometheus-scrape-interval=15s", "--prometheus-names-refresh=0s", "--prometheus-queries=/etc/gpuscale/queries/queries.yaml", "--prometheus-ca-file=/etc/prometheus-ca/ca.crt",
		"--prometheus-bearer-token-file=/var/run/secrets/kubernetes.io/serviceaccount/token"} {
		if !slices.Contains(a, want) {
			t.Errorf("adapter args %v lack %s", a, want)
		}
	}
	cm := named(t, objs, "ConfigMap", "-adapter-queries")
	var q map[string]map[string]string
	if err := yaml.Unmarshal([]byte(dig(cm, "data", "queries.yaml").(string)), &q); err != nil {
		t.Fatal(err)
	}
	if got := q["pods"]["gpu_utilization"]; got != `avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod=~"{{.PodRegex}}"})` {
		t.Errorf("queries.yaml pods.gpu_utilization = %q", got)
	}
	c := container(t, dep)
	if !hasNamed(c["volumeMounts"], "queries") || !hasNamed(dig(dep, "spec", "template", "spec", "volumes"), "queries") {
		t.Error("the queries ConfigMap is not mounted")
	}
}

// checkSharedGPUs: the exporter reads processes' cgroups from the host's
// /proc and their pods from the CRI socket, both mounted read-only where
// its flags say.
func checkSharedGPUs(t *testing.T, objs []object) {
	ds := named(t, objs, "DaemonSet", "-exporter")
	a := args(t, ds)
	for _, want := range []string{"--container-runtime-socket=/run/gpuscale/cri.sock", "--proc-root=/host/proc", "--profiling=true"} {
		if !slices.Contains(a, want) {
			t.Errorf("exporter args %v lack %s", a, want)
		}
	}
	mounts := map[string]string{}
	for _, m := range container(t, ds)["volumeMounts"].([]any) {
		if dig(m, "readOnly") != true {
			t.Errorf("mount %v is writable", m)
		}
		mounts[dig(m, "name").(string)] = dig(m, "mountPath").(string)
	}
	hostPaths := map[string]string{}
	vols, _ := dig(ds, "spec", "template", "spec", "volumes").([]any)
	for _, v := range vols {
		if p, ok := dig(v, "hostPath", "path").(string); ok {
			hostPaths[dig(v, "name").(string)] = p
		}
	}
	for name, want := range map[string][2]string{
		"cri-socket": {"/var/run/crio/crio.sock", "/run/gpuscale/cri.sock"},
		"host-proc":  {"/proc", "/host/proc"},
	} {
		if hostPaths[name] != want[0] || mounts[name] != want[1] {
			t.Errorf("volume %s: host %q at %q, want %q at %q", name, hostPaths[name], mounts[name], want[0], want[1])
		}
	}
}

// TestChartCapacityObjective: the capacity signal's objective reaches the
// adapter as its flag, and the default leaves the binary's.
func TestChartCapacityObjective(t *testing.T) {
	has := func(objs []object, want string) bool {
		return slices.Contains(args(t, named(t, objs, "Deployment", "adapter")), want)
	}
	if objs := mustRender(t); slices.ContainsFunc(args(t, named(t, objs, "Deployment", "adapter")), func(a string) bool {
		return strings.HasPrefix(a, "--capacity-ttft-objective")
	}) {
		t.Error("default render sets --capacity-ttft-objective; the binary's default should stand")
	}
	if objs := mustRender(t, "--set", "adapter.config.capacityTTFTObjective=750ms"); !has(objs, "--capacity-ttft-objective=750ms") {
		t.Errorf("adapter args %v lack --capacity-ttft-objective=750ms", args(t, named(t, objs, "Deployment", "adapter")))
	}
}

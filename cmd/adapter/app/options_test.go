package app

import (
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/promsource"
)

func TestValidateSource(t *testing.T) {
	checkValidate(t, []validateCase{
		{"embedded default", func(*Options) {}, ""},
		{"prometheus", func(o *Options) { o.Source, o.Prometheus.URL = SourcePrometheus, "https://prom.monitoring:9090/prefix" }, ""},
		{"prometheus without url", func(o *Options) { o.Source = SourcePrometheus }, "--prometheus-url is required"},
		{"prometheus bad url", func(o *Options) { o.Source, o.Prometheus.URL = SourcePrometheus, "prom:9090" }, "not an http(s) URL"},
		{"prometheus no timeout", func(o *Options) {
			o.Source, o.Prometheus.URL, o.Prometheus.Timeout = SourcePrometheus, "http://p:9090", 0
		}, "--prometheus-timeout"},
		{"prometheus with scale-down", func(o *Options) {
			o.Source, o.Prometheus.URL, o.ScaleDown.Enabled = SourcePrometheus, "http://p:9090", true
		}, ""},
		{"unknown source", func(o *Options) { o.Source = "thanos" }, "--source must be embedded or prometheus"},
		{"no idle connections", func(o *Options) { o.MaxIdleConns = 0 }, "--scrape-max-idle-conns must be at least 1"},
		{"in-flight budget at its least", func(o *Options) { o.MaxInflightBytes = 64 * 512 << 10 }, ""},
		{"in-flight budget too small", func(o *Options) { o.MaxInflightBytes = 64*512<<10 - 1 }, "--scrape-max-inflight-bytes must be at least 33554432"},
		{"more workers than the default budget serves", func(o *Options) { o.ScrapeWorkers = 256 }, "--scrape-max-inflight-bytes must be at least"},
	}, nil)
}

// TestTrustFlags: the flags that say whom to trust parse, default to the
// plain manifests' exporter, and refuse what would silently trust no one
// or everyone.
func TestTrustFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		check   func(*Options) bool
		wantErr string
	}{
		{"defaults", nil, func(o *Options) bool {
			return o.ExporterNamespace == "gpuscale" && o.ExporterDaemonSet == "gpuscale-exporter" && !o.ScrapeHostNetwork && o.MaxTargetsPerNamespace == 2000
		}, ""},
		{"chart's", []string{"--exporter-namespace=gpu-system", "--exporter-daemonset=prod-gpuscale-exporter", "--scrape-host-network", "--max-targets-per-namespace=10000"},
			func(o *Options) bool {
				return o.ExporterNamespace == "gpu-system" && o.ExporterDaemonSet == "prod-gpuscale-exporter" && o.ScrapeHostNetwork && o.MaxTargetsPerNamespace == 10000
			}, ""},
		{"every namespace, explicitly", []string{"--exporter-namespace=*"}, func(o *Options) bool { return o.ExporterNamespace == discovery.AnyNamespace }, ""},
		{"no cap", []string{"--max-targets-per-namespace=0"}, func(o *Options) bool { return o.MaxTargetsPerNamespace == 0 }, ""},
		{"empty namespace", []string{"--exporter-namespace="}, nil, "--exporter-namespace \"\""},
		{"bad namespace", []string{"--exporter-namespace=GPU_System"}, nil, "--exporter-namespace \"GPU_System\""},
		{"empty DaemonSet", []string{"--exporter-daemonset="}, nil, "--exporter-daemonset \"\""},
		{"bad DaemonSet", []string{"--exporter-daemonset=a/b"}, nil, "--exporter-daemonset \"a/b\""},
		{"negative cap", []string{"--max-targets-per-namespace=-1"}, nil, "--max-targets-per-namespace must be 0 (no cap) or more"},
		{"exporter path with a query", []string{"--exporter-path=/metrics?x=1"}, nil, "--exporter-path"},
		{"prometheus annotations off by default", nil, func(o *Options) bool { return !o.ScrapePrometheusAnnotations && !o.needsNamespaces() }, ""},
		{"prometheus annotations everywhere", []string{"--scrape-prometheus-annotations"},
			func(o *Options) bool { return o.ScrapePrometheusAnnotations && !o.needsNamespaces() }, ""},
		{"prometheus annotations in selected namespaces", []string{"--scrape-prometheus-annotations", "--prometheus-annotations-namespace-selector=team in (ml,llm)"},
			func(o *Options) bool { return o.needsNamespaces() }, ""},
		{"bad namespace selector", []string{"--scrape-prometheus-annotations", "--prometheus-annotations-namespace-selector=team in ml"}, nil, "--prometheus-annotations-namespace-selector"},
		{"namespace selector without the opt-in", []string{"--prometheus-annotations-namespace-selector=team=ml"}, nil, "needs --scrape-prometheus-annotations"},
		{"exporter path without /", []string{"--exporter-path=metrics"}, nil, "--exporter-path"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("adapter", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			o.Complete()
			err := o.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !tc.check(o) {
				t.Errorf("options %+v", o)
			}
		})
	}
}

// TestPrometheusSource: prometheus mode builds a PromQL source and no
// scrape loop, and a broken queries file fails at start.
func TestPrometheusSource(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("pods:\n  inference_queue_depth: 'sum by (namespace, pod) (my_queue{namespace=\"{{.Namespace}}\", pod=~\"{{.PodRegex}}\"})'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("pods:\n  no_such_metric: 'x'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.Source, o.Prometheus.URL, o.Prometheus.Queries = SourcePrometheus, "http://127.0.0.1:1", good
	o.registerer = prometheus.NewRegistry()
	o.Complete()
	src, err := o.newSource(nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.values.(*promsource.Source); !ok {
		t.Fatalf("prometheus source: values %T, want *promsource.Source", src.values)
	}
	ready := false
	src.loop(t.Context(), func() { ready = true })
	if !ready {
		t.Error("prometheus source is not ready at once")
	}
	o.Prometheus.Queries = bad
	if _, err := o.newSource(nil, nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "no_such_metric") {
		t.Fatalf("bad queries file: err = %v", err)
	}
}

func TestValidateKEDAScaler(t *testing.T) {
	keda := func(f func(*KEDAScalerOptions)) func(*Options) {
		return func(o *Options) { f(&o.KEDAScaler) }
	}
	checkValidate(t, []validateCase{
		{"off by default", keda(func(*KEDAScalerOptions) {}), ""},
		{"on with a client CA", keda(func(o *KEDAScalerOptions) { o.Port, o.ClientCAFile = 6000, "/ca.crt" }), ""},
		{"on without client auth nor authorization, knowingly", keda(func(o *KEDAScalerOptions) {
			o.Port, o.NoClientAuth, o.Authorization = 6000, true, AuthorizeNone
		}), ""},
		{"authorization without client certificates", keda(func(o *KEDAScalerOptions) { o.Port, o.NoClientAuth = 6000, true }), "--keda-scaler-authorization=subjectaccessreview"},
		{"unknown authorization", keda(func(o *KEDAScalerOptions) { o.Port, o.ClientCAFile, o.Authorization = 6000, "/ca.crt", "rbac" }), "--keda-scaler-authorization"},
		{"negative stream bound", keda(func(o *KEDAScalerOptions) { o.Port, o.ClientCAFile, o.Limits.MaxStreams = 6000, "/ca.crt", -1 }), "--keda-scaler-max-streams"},
		{"on without a client CA", keda(func(o *KEDAScalerOptions) { o.Port = 6000 }), "--keda-scaler-client-ca-file"},
		{"client CA and no client auth", keda(func(o *KEDAScalerOptions) { o.Port, o.ClientCAFile, o.NoClientAuth = 6000, "/ca.crt", true }), "exclude each other"},
		{"not a port", keda(func(o *KEDAScalerOptions) { o.Port, o.ClientCAFile = 70000, "/ca.crt" }), "is not a port"},
		{"check interval too short", keda(func(o *KEDAScalerOptions) {
			o.Port, o.ClientCAFile, o.CheckInterval = 6000, "/ca.crt", time.Millisecond
		}), "--keda-scaler-check-interval"},
	}, nil)
}

func TestValidateCapacity(t *testing.T) {
	checkValidate(t, []validateCase{
		{"defaults", func(*Options) {}, ""},
		{"an objective and a replay's time scale", func(o *Options) { o.CapacityTTFTObjective, o.CapacityTimeScale = 500*time.Millisecond, 6 }, ""},
		{"no objective", func(o *Options) { o.CapacityTTFTObjective = 0 }, "--capacity-ttft-objective"},
		{"an ITL objective", func(o *Options) { o.CapacityITLObjective = 80 * time.Millisecond }, ""},
		{"a negative ITL objective", func(o *Options) { o.CapacityITLObjective = -time.Millisecond }, "--capacity-itl-objective"},
		{"time scale zero", func(o *Options) { o.CapacityTimeScale = 0 }, "--capacity-time-scale"},
		{"time scale not finite", func(o *Options) { o.CapacityTimeScale = math.Inf(1) }, "--capacity-time-scale"},
		{"1,000 capacity HPAs in a namespace", func(o *Options) { o.CapacityMaxWorkloadsPerNamespace = 1000 }, ""},
		{"no workload in a namespace", func(o *Options) { o.CapacityMaxWorkloadsPerNamespace = 0 }, "--capacity-max-workloads-per-namespace"},
		{"more in a namespace than in all", func(o *Options) { o.CapacityMaxWorkloadsPerNamespace, o.CapacityMaxWorkloads = 300, 200 }, "--capacity-max-workloads"},
	}, func(t *testing.T, o *Options) {
		cfg := o.capacityConfig()
		if cfg.Objective != o.CapacityTTFTObjective || cfg.Window != o.TTFTWindow || cfg.TimeScale != o.CapacityTimeScale || cfg.ITLObjective != o.CapacityITLObjective ||
			cfg.MaxTargetsPerNamespace != o.CapacityMaxWorkloadsPerNamespace || cfg.MaxTargets != o.CapacityMaxWorkloads {
			t.Errorf("capacityConfig = %+v, not the flags", cfg)
		}
	})
}

// validateCase is one case of Options.Validate: set edits the defaults, and
// wantErr is part of the error expected, "" for none.
type validateCase struct {
	name    string
	set     func(*Options)
	wantErr string
}

// checkValidate runs each case through Complete and Validate; passed, when
// not nil, is called with the options of each case that must validate.
func checkValidate(t *testing.T, cases []validateCase, passed func(*testing.T, *Options)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.set(o)
			o.Complete()
			err := o.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if passed != nil {
					passed(t, o)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestMetricsRegistererIsServed: unless a test gives its own, the adapter's
// metrics go to the legacy registry, the one its /metrics serves.
func TestMetricsRegistererIsServed(t *testing.T) {
	if got := NewOptions().metricsRegisterer(); got != legacyregistry.Registerer() {
		t.Errorf("metrics registerer %T, want the API server's legacy registry", got)
	}
}

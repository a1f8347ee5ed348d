package app

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
)

// TestLoggingFlags: the adapter takes --logging-format=text|json (as the
// exporter and inferencesim do) and -v, and refuses another format.
func TestLoggingFlags(t *testing.T) {
	t.Cleanup(func() { _ = logsapi.ResetForTest(nil) })
	for _, tc := range []struct {
		args    []string
		format  string
		wantErr string
	}{
		{nil, "text", ""},
		{[]string{"--logging-format=json", "-v=2"}, "json", ""},
		{[]string{"--logging-format=xml"}, "", "Unsupported log format"},
	} {
		fs := pflag.NewFlagSet("adapter", pflag.ContinueOnError)
		c := LoggingFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		_, err := ApplyLogging(c, io.Discard)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil || c.Format != tc.format {
			t.Errorf("%v: format %q, err %v", tc.args, c.Format, err)
		}
		_ = logsapi.ResetForTest(nil)
	}
}

// TestAbandonedDiscoveryIsDebug: the generic API server's error lines for
// an aborted request are debug lines on a discovery path (the
// aggregator's availability check drops the attempts that lose) and stay
// errors on a metric request's path; other errors are untouched. They go
// through klog's error handler, as the API server's do.
func TestAbandonedDiscoveryIsDebug(t *testing.T) {
	for _, tc := range []struct {
		name      string
		msg, key  string
		uri       string
		verbosity string
		want      string // the level it is logged at; "" not logged
	}{
		{"discovery abort", "Timeout or abort while handling", "URI", "/apis/custom.metrics.k8s.io/v1beta1", "0", ""},
		{"discovery abort at -v=4", "Timeout or abort while handling", "URI", "/apis/custom.metrics.k8s.io/v1beta2", "4", "DEBUG"},
		{"external group", "Timeout or abort while handling", "URI", "/apis/external.metrics.k8s.io/v1beta1", "0", ""},
		{"openapi", "Timeout or abort while handling", "URI", "/openapi/v2", "0", ""},
		{"post-timeout on discovery", "Post-timeout activity", "path", "/apis/custom.metrics.k8s.io/v1beta2", "0", ""},
		{"metric request abort", "Timeout or abort while handling", "URI", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/llm/pods/%2A/inference_queue_depth", "0", "ERROR"},
		{"external metric abort", "Timeout or abort while handling", "URI", "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/inference_queue_depth?labelSelector=model", "0", "ERROR"},
		{"post-timeout on a metric", "Post-timeout activity", "path", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/llm/deployments.apps/llm/m", "0", "ERROR"},
		{"another error on discovery", "apiserver was unable to write a JSON response", "URI", "/apis/custom.metrics.k8s.io/v1beta1", "0", "ERROR"},
		{"wrong key", "Timeout or abort while handling", "path", "/apis/custom.metrics.k8s.io/v1beta1", "0", "ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { _ = logsapi.ResetForTest(nil) })
			fs := pflag.NewFlagSet("adapter", pflag.ContinueOnError)
			c := LoggingFlags(fs)
			if err := fs.Parse([]string{"-v=" + tc.verbosity}); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := ApplyLogging(c, &buf); err != nil {
				t.Fatal(err)
			}
			utilruntime.HandleErrorWithContext(context.Background(), nil, tc.msg, "method", "GET", tc.key, tc.uri, "auditID", "a1")
			klog.Flush()
			out := buf.String()
			switch {
			case tc.want == "" && strings.Contains(out, tc.msg):
				t.Errorf("logged: %s", out)
			case tc.want != "" && !strings.Contains(out, "level="+tc.want+" msg=\""+tc.msg+"\""):
				t.Errorf("want a %s line for %q, got: %q", tc.want, tc.msg, out)
			}
		})
	}
}

package app

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
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

package app

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestValidateExporterToken(t *testing.T) {
	checkValidate(t, []validateCase{
		{"a file alone (the user's Secret)", func(o *Options) { o.ExporterTokenFile = "/etc/gpuscale/exporter-token/token" }, ""},
		{"the Secret the adapter makes", func(o *Options) {
			o.ExporterTokenFile, o.ExporterTokenSecret = "/etc/gpuscale/exporter-token/token", "gpuscale/gpuscale-exporter-token"
		}, ""},
		{"a Secret without the file", func(o *Options) { o.ExporterTokenSecret = "gpuscale/gpuscale-exporter-token" }, "--exporter-token-secret needs --exporter-token-file"},
		{"a Secret without a namespace", func(o *Options) {
			o.ExporterTokenFile, o.ExporterTokenSecret = "/t", "gpuscale-exporter-token"
		}, "want NAMESPACE/NAME"},
		{"a bad name", func(o *Options) { o.ExporterTokenFile, o.ExporterTokenSecret = "/t", "gpuscale/Token_1" }, "want NAMESPACE/NAME"},
	}, nil)
}

// TestExporterTokenFileAbsentAtStart: the Secret volume is optional and
// empty until the Secret exists; the adapter starts all the same, and
// sends no token (pkg/adapter/gather's TestExporterTokenFollowsItsFile follows
// the file from there).
func TestExporterTokenFileAbsentAtStart(t *testing.T) {
	o := NewOptions()
	reg := prometheus.NewPedanticRegistry()
	o.registerer = reg
	o.ExporterTokenFile = filepath.Join(t.TempDir(), "exporter-token", "token")
	f, err := o.exporterTokenFile(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("a token file not there yet: %v", err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Errorf("the token file's metrics: %d series registered with the adapter's registerer (%v)", n, err)
	}
	if f == nil {
		t.Fatal("no token file followed")
	}
	if tok := f.Token(); tok != nil {
		t.Errorf("token %q before its file exists", tok)
	}
}

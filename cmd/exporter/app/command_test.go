package app_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/gpuscale/gpuscale/cmd/exporter/app"
	"github.com/gpuscale/gpuscale/pkg/logging/loggingtest"
)

// TestCommand: what the exporter's command line does before it serves:
// usage errors are app.ErrUsage (exit 2), --help is pflag.ErrHelp and
// --version prints.
func TestCommand(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr error
		errText string
		stdout  string
	}{
		{[]string{"--no-such-flag"}, app.ErrUsage, "no-such-flag", ""},
		{[]string{"--backend=tpu"}, app.ErrUsage, "--backend", ""},
		{[]string{"--backend=sim", "--logging-format=xml"}, app.ErrUsage, "--logging-format", ""},
		{[]string{"--help"}, pflag.ErrHelp, "", ""},
		{[]string{"--version"}, nil, "", "exporter"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := app.NewCommand().Execute(context.Background(), tc.args, &out, io.Discard)
			if !errors.Is(err, tc.wantErr) || tc.wantErr != nil && !strings.Contains(err.Error(), tc.errText) {
				t.Fatalf("Execute(%q) = %v, want %v naming %q", tc.args, err, tc.wantErr, tc.errText)
			}
			if !strings.Contains(out.String(), tc.stdout) {
				t.Errorf("stdout %q, want %q", out.String(), tc.stdout)
			}
		})
	}
}

// TestLoggingOneFormat: the exporter's logging setup (its flags, then
// Options.Log.Setup, as Command.Execute calls it) puts a line through its
// logger, slog's default and klog (client-go's path) in one format.
func TestLoggingOneFormat(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			def := slog.Default()
			t.Cleanup(func() { klog.ClearLogger(); slog.SetDefault(def) })
			c := app.NewCommand()
			if err := c.Flags().Parse([]string{"--logging-format=" + format}); err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			log, err := c.Options.Log.Setup(&b)
			if err != nil {
				t.Fatal(err)
			}
			log.Info("through slog", "k", "v")
			slog.Default().Warn("through slog's default", "k", "v")
			klog.InfoS("through klog.InfoS", "k", "v")
			klog.FromContext(context.Background()).Info("through klog.FromContext", "k", "v")
			loggingtest.CheckLines(t, format, b.String(), []string{"through slog", "through slog's default", "through klog.InfoS", "through klog.FromContext"})
		})
	}
}

package app

import (
	"bytes"
	"context"
	"errors"
	stdlog "log"
	"log/slog"
	"testing"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/gpuscale/gpuscale/pkg/logging/loggingtest"
)

// TestLoggingOneFormat: after ApplyLogging, a line logged through the
// adapter's slog logger, slog's default, klog's structured calls (the
// apiserver library's and client-go's path) and the standard library's log
// comes out in the one format the flags ask for.
func TestLoggingOneFormat(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			t.Cleanup(restoreLogging())
			fs := pflag.NewFlagSet("adapter", pflag.ContinueOnError)
			c := LoggingFlags(fs)
			if err := fs.Parse([]string{"--logging-format=" + format, "-v=2"}); err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			log, err := ApplyLogging(c, &b)
			if err != nil {
				t.Fatal(err)
			}
			log.Info("through slog", "k", "v")
			slog.Default().Warn("through slog's default", "k", "v")
			klog.InfoS("through klog.InfoS", "k", "v")
			klog.ErrorS(errors.New("boom"), "through klog.ErrorS", "k", "v")
			klog.V(2).InfoS("through klog.V(2)", "k", "v")
			klog.V(3).InfoS("klog.V(3), below -v=2", "k", "v")
			klog.FromContext(context.Background()).Info("through klog.FromContext", "k", "v")
			stdlog.Print("through the standard library's log")
			loggingtest.CheckLines(t, format, b.String(), []string{"through slog", "through slog's default", "through klog.InfoS",
				"through klog.ErrorS", "through klog.V(2)", "through klog.FromContext", "through the standard library's log"})
		})
	}
}

// restoreLogging undoes ApplyLogging's global settings.
func restoreLogging() func() {
	def := slog.Default()
	return func() {
		_ = logsapi.ResetForTest(nil)
		klog.ClearLogger()
		slog.SetDefault(def)
	}
}

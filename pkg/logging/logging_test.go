package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	stdlog "log"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/gpuscale/gpuscale/pkg/logging/loggingtest"
)

func TestLogger(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		check   func(string) bool
		wantErr string
	}{
		{"text by default", nil, func(s string) bool { return strings.Contains(s, "msg=hello") && strings.Contains(s, "k=v") }, ""},
		{"json", []string{"--logging-format=json"}, func(s string) bool {
			var m map[string]any
			return json.Unmarshal([]byte(s), &m) == nil && m["msg"] == "hello" && m["k"] == "v"
		}, ""},
		{"level filters", []string{"--log.level=error"}, func(s string) bool { return s == "" }, ""},
		{"unknown format", []string{"--logging-format=xml"}, nil, "--logging-format"},
		{"unknown level", []string{"--log.level=loud"}, nil, "--log.level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := New()
			fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			log, err := o.Logger(&b)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Logger: %v, want an error naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			log.Info("hello", "k", "v")
			if !tc.check(strings.TrimSpace(b.String())) {
				t.Errorf("logged %q", b.String())
			}
		})
	}
}

// TestSetupOneFormat: after Setup, a line logged through the returned
// logger, slog's default, klog's structured calls (client-go's path) and
// the standard library's log comes out in the one format asked for, at
// the level asked for.
func TestSetupOneFormat(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			def := slog.Default()
			t.Cleanup(func() { klog.ClearLogger(); slog.SetDefault(def) })
			o := New()
			fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse([]string{"--logging-format=" + format, "--log.level=info"}); err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			log, err := o.Setup(&b)
			if err != nil {
				t.Fatal(err)
			}
			log.Info("through slog", "k", "v")
			log.Debug("slog debug, below info", "k", "v")
			slog.Default().Warn("through slog's default", "k", "v")
			klog.InfoS("through klog.InfoS", "k", "v")
			klog.ErrorS(errors.New("boom"), "through klog.ErrorS", "k", "v")
			klog.V(1).InfoS("klog.V(1), below info", "k", "v")
			klog.FromContext(context.Background()).Info("through klog.FromContext", "k", "v")
			stdlog.Print("through the standard library's log")
			loggingtest.CheckLines(t, format, b.String(), []string{"through slog", "through slog's default", "through klog.InfoS",
				"through klog.ErrorS", "through klog.FromContext", "through the standard library's log"})
		})
	}
}

package logformat

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/pflag"
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

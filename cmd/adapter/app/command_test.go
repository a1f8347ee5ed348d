package app

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestCommand: what the adapter's command line does before it serves:
// usage errors are ErrUsage (exit 2), --help is pflag.ErrHelp, --version
// prints, and the deprecated --scale-down-lease-namespace still sets the
// Lease's namespace.
func TestCommand(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr error
		errText string
		stdout  string
	}{
		{[]string{"--no-such-flag"}, ErrUsage, "no-such-flag", ""},
		{[]string{"--logging-format=xml"}, ErrUsage, "Unsupported log format", ""},
		{[]string{"--help"}, pflag.ErrHelp, "", ""},
		{[]string{"--version"}, nil, "", "adapter"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Cleanup(restoreLogging())
			var out bytes.Buffer
			err := NewCommand().Execute(context.Background(), tc.args, &out, io.Discard)
			if !errors.Is(err, tc.wantErr) || tc.wantErr != nil && !strings.Contains(err.Error(), tc.errText) {
				t.Fatalf("Execute(%q) = %v, want %v naming %q", tc.args, err, tc.wantErr, tc.errText)
			}
			if !strings.Contains(out.String(), tc.stdout) {
				t.Errorf("stdout %q, want %q", out.String(), tc.stdout)
			}
		})
	}
}

// TestLeaderElectionFlags: component-base's flags configure the election,
// and the adapter's older --scale-down-lease-namespace is an alias of
// --leader-elect-resource-namespace.
func TestLeaderElectionFlags(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		elect     bool
		namespace string
		name      string
		lease     string
	}{
		{nil, true, "gpuscale", scaleDownLease, "15s"},
		{[]string{"--scale-down-lease-namespace=ops"}, true, "ops", scaleDownLease, "15s"},
		{[]string{"--leader-elect-resource-namespace=ops", "--leader-elect-resource-name=sd", "--leader-elect-lease-duration=30s"}, true, "ops", "sd", "30s"},
		{[]string{"--leader-elect=false"}, false, "gpuscale", scaleDownLease, "15s"},
	} {
		a := NewAdapter()
		if err := a.Flags().Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		le := a.Options.ScaleDown.LeaderElection
		if le.LeaderElect != tc.elect || le.ResourceNamespace != tc.namespace || le.ResourceName != tc.name || le.LeaseDuration.Duration.String() != tc.lease {
			t.Errorf("%q: %+v", tc.args, le)
		}
	}
}

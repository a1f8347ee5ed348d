package localcluster

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/harness/childproc"
)

// TestAwaitFlagsPortRace checks that a component that lost its port to
// another process makes Start retry, and any other failure does not.
func TestAwaitFlagsPortRace(t *testing.T) {
	tests := []struct {
		name, script string
		portTaken    bool
	}{
		{"bind failure", `echo "failed to listen on 127.0.0.1:1: bind: address already in use" >&2; exit 1`, true},
		{"other failure", `echo "invalid flag" >&2; exit 1`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Cluster{log: slog.New(slog.DiscardHandler)}
			p, err := childproc.Start("comp", "/bin/sh", []string{"-c", tt.script}, nil, filepath.Join(t.TempDir(), "comp.log"), nil)
			if err != nil {
				t.Fatal(err)
			}
			err = c.await(context.Background(), p, "ready", time.Minute, func(context.Context) bool { return false })
			if err == nil || errors.Is(err, errPortTaken) != tt.portTaken {
				t.Errorf("await = %v; want errPortTaken: %v", err, tt.portTaken)
			}
		})
	}
}

// Package e2e runs gpuscale on a real control plane: the real kube-apiserver
// aggregation layer routes metrics requests to the adapter, and the real HPA
// controller scales Deployments of simulated inference servers on its
// answers. It needs the control-plane binaries (hack/control-plane-build.sh)
// and runs when GPUSCALE_E2E=1 (make e2e, make test, CI).
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
)

// Timings the suite runs with: short, so the suite fits in minutes, and
// the figures in docs/performance.md are measured with them.
const (
	scrapeInterval = time.Second
	hpaSync        = 3 * time.Second
	maxStaleness   = 3 * time.Second
	ttftWindow     = 20 * time.Second
	scaleDownIdle  = 10 * time.Second
)

var env *devenv.Env

func TestMain(m *testing.M) {
	if os.Getenv("GPUSCALE_E2E") != "1" {
		fmt.Println("e2e: GPUSCALE_E2E is not 1; the end-to-end suite runs through `make e2e` (part of `make test`)")
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gpuscale-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute) // a cold control-plane build included
	defer cancel()
	start := time.Now()
	env, err = devenv.Up(ctx, devenv.Options{
		Dir: dir, Nodes: 3, GPUsPerNode: 8, HPASyncPeriod: hpaSync, Logger: log,
		AdapterArgs: []string{"--scrape-interval=" + scrapeInterval.String(), "--max-staleness=" + maxStaleness.String(),
			"--ttft-window=" + ttftWindow.String(), "--v=2",
			"--scale-down-controller", "--scale-down-resync=2s", "--scale-down-idle-time=" + scaleDownIdle.String()},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: environment: %v\n(logs in %s)\n", err, filepath.Join(dir, "logs"))
		return 1
	}
	fmt.Printf("e2e: environment up in %v (logs in %s)\n", time.Since(start).Round(time.Millisecond), dir)
	code := m.Run()
	if err := env.Down(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: teardown: %v\n", err)
	}
	if code == 0 && os.Getenv("GPUSCALE_E2E_KEEP") == "" {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Printf("e2e: logs kept in %s\n", dir)
	}
	return code
}

// needEnv skips only when the suite was not asked for; with GPUSCALE_E2E=1
// a missing environment already failed TestMain.
func needEnv(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip("GPUSCALE_E2E is not 1")
	}
}

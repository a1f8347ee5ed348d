// Package keda runs gpuscale beside a real KEDA (v2.21.0's operator and
// metrics API server, built from the Go module by hack/keda-build.sh) on
// the local control plane: KEDA owns v1beta1.external.metrics.k8s.io,
// gpuscale keeps custom.metrics.k8s.io and serves KEDA's external scaler
// protocol, and ScaledObjects with a gpuscale trigger scale simulated
// inference Deployments through KEDA and the real HPA controller. It runs
// when GPUSCALE_E2E=1 (make e2e).
package keda

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/kedaenv"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// Timings: short, so the scenario fits in a couple of minutes.
const (
	scrapeInterval = time.Second
	hpaSync        = 3 * time.Second
	maxStaleness   = 3 * time.Second
)

var (
	env        *devenv.Env
	kedaPKI    *kedaenv.PKI
	kedaRun    *kedaenv.KEDA
	scalerAddr string // the adapter's KEDA scaler port
)

func TestMain(m *testing.M) {
	if os.Getenv("GPUSCALE_E2E") != "1" {
		fmt.Println("keda: GPUSCALE_E2E is not 1; the KEDA scenario runs through `make e2e` (part of `make test`)")
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gpuscale-keda-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute) // cold builds included
	defer cancel()
	code := 1
	defer func() {
		if code == 0 && os.Getenv("GPUSCALE_E2E_KEEP") == "" {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Printf("keda: logs kept in %s\n", dir)
		}
	}()
	start := time.Now()
	if kedaPKI, err = kedaenv.NewPKI(filepath.Join(dir, "keda-certs")); err != nil {
		fmt.Fprintf(os.Stderr, "keda: %v\n", err)
		return 1
	}
	ports, err := testenv.FreePorts(1)
	if err != nil {
		fmt.Fprintf(os.Stderr, "keda: %v\n", err)
		return 1
	}
	port := ports[0]
	scalerAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	env, err = devenv.Up(ctx, devenv.Options{
		Dir: dir, Nodes: 2, GPUsPerNode: 8, HPASyncPeriod: hpaSync, Logger: log,
		AdapterArgs: []string{"--scrape-interval=" + scrapeInterval.String(), "--max-staleness=" + maxStaleness.String(), "--v=2",
			"--keda-scaler-port=" + strconv.Itoa(port), "--keda-scaler-bind-address=127.0.0.1",
			"--keda-scaler-client-ca-file=" + kedaPKI.CAFile, "--keda-scaler-check-interval=250ms"},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "keda: environment: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Down(); err != nil {
			fmt.Fprintf(os.Stderr, "keda: teardown: %v\n", err)
		}
	}()
	kedaRun, err = kedaenv.Start(ctx, kedaenv.Options{Cluster: env.Cluster, Dir: dir, PKI: kedaPKI, Logger: log, BuildLog: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "keda: KEDA: %v\n", err)
		return 1
	}
	defer func() {
		if err := kedaRun.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "keda: stopping KEDA: %v\n", err)
		}
	}()
	fmt.Printf("keda: environment and KEDA up in %v (logs in %s)\n", time.Since(start).Round(time.Millisecond), dir)
	code = m.Run()
	return code
}

func needEnv(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip("GPUSCALE_E2E is not 1")
	}
}

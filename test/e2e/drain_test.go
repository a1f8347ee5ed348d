package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHelmNotesScaleDownDrain: with the scale-down controller on, the
// chart's notes give the inference pod template the opt-in label and the
// drain (a preStop sleep, a grace period above it) that adapter recommend
// prints.
func TestHelmNotesScaleDownDrain(t *testing.T) {
	needEnv(t)
	root, helm := chartTools(t)
	ns := namespace(t, "e2e-helm-notes-drain")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	notes := func(args ...string) string {
		cmd := exec.CommandContext(ctx, helm, append([]string{"install", "gs-drain", filepath.Join(root, chartDir), "--namespace", ns,
			"--set", "apiService.takeOver.custom.v1beta2=true", "--set", "apiService.takeOver.custom.v1beta1=true",
			"--set", "apiService.takeOver.external.v1beta1=true",
			"--dry-run=server", "--take-ownership", "--kubeconfig", env.Cluster.AdminKubeconfig()}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helm install --dry-run=server %v: %v", args, err)
		}
		_, n, ok := strings.Cut(string(out), "\nNOTES:\n")
		if !ok {
			t.Fatalf("no NOTES in helm's output:\n%s", out)
		}
		return n
	}
	on := notes("--set", "scaleDown.enabled=true")
	for _, want := range []string{"gpuscale.io/scale-down: managed", "adapter recommend", "terminationGracePeriodSeconds: 135", "--shutdown-timeout=120", "preStop: {sleep: {seconds: 5}}"} {
		if !strings.Contains(on, want) {
			t.Errorf("scale-down notes lack %q:\n%s", want, on)
		}
	}
	if off := notes(); strings.Contains(off, "preStop") {
		t.Errorf("notes without the scale-down controller advise a drain:\n%s", off)
	}
}

package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BinDirEnv names the environment variable that points at a folder holding
// prebuilt control-plane binaries, bypassing the build script.
const BinDirEnv = "GPUSCALE_K8S_BIN"

// buildScript builds and caches the pinned binaries and prints their folder;
// it returns at once when they are cached.
const buildScript = "hack/control-plane-build.sh"

// binaryNames are the executables Start needs in the bin folder.
var binaryNames = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"}

// resolveBinDir returns the folder of the control-plane binaries: dir if
// set, else $GPUSCALE_K8S_BIN, else what the repository's build script
// prints (building the binaries first if they are not cached).
func resolveBinDir(ctx context.Context, dir string, log *slog.Logger, buildLog io.Writer) (string, error) {
	if dir == "" {
		dir = os.Getenv(BinDirEnv)
	}
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		log.Info("running the control-plane build script (at once when cached, about 20 minutes for a first build)", "script", filepath.Join(root, buildScript))
		if dir, err = RunBuildScript(ctx, root, buildScript, buildLog); err != nil {
			return "", err
		}
	}
	if err := checkBinaries(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// checkBinaries verifies that dir holds every binary Start runs.
func checkBinaries(dir string) error {
	var missing []string
	for _, name := range binaryNames {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("localcluster: bin folder %s lacks executables %s (build them with %s)",
			dir, strings.Join(missing, ", "), buildScript)
	}
	return nil
}

// RunBuildScript runs script (a path relative to the repository root
// root) and returns the folder it prints on its last line of output: the
// contract of the cache builds (hack/control-plane-build.sh,
// hack/keda-build.sh). Progress on stderr is copied to buildLog.
func RunBuildScript(ctx context.Context, root, script string, buildLog io.Writer) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, script))
	cmd.Dir = root
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if buildLog != nil {
		cmd.Stderr = io.MultiWriter(&stderr, buildLog)
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("localcluster: %s: %w: %s", script, err, lastLine(stderr.Bytes()))
	}
	dir := lastLine(stdout.Bytes())
	if dir == "" {
		return "", fmt.Errorf("localcluster: %s printed no bin folder", script)
	}
	return dir, nil
}

// RepoRoot walks up from the working directory to the module root that
// holds the build script (go test runs in the package folder).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("localcluster: working directory: %w", err)
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) && fileExists(filepath.Join(dir, buildScript)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("localcluster: no go.mod with %s above the working directory; set %s or Options.BinDir",
				buildScript, BinDirEnv)
		}
		dir = parent
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

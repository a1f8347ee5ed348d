// Package containers runs the images `make images` builds the way the Helm
// chart runs them: it renders deploy/helm/gpuscale with `helm template`,
// takes each container's image, command, args, user, read-only root,
// capabilities, mounts and probes from the rendered objects and runs it
// under podman, against the real local control plane (internal/harness/devenv)
// for the adapter. Each place where this machine forces the test away from
// the rendered pod is a named deviation with its reason, next to the code
// that makes it.
//
// It runs when GPUSCALE_IMAGES=1 (make test-images, part of make test),
// as root, with podman and runc installed (.ci/run).
package containers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
)

const (
	release   = "gpuscale"
	chartPath = "deploy/helm/gpuscale"
)

var (
	env            *devenv.Env
	root           string
	containersConf string
	// tag is the images' tag and the version stamped into them.
	tag string
)

func TestMain(m *testing.M) {
	if os.Getenv("GPUSCALE_IMAGES") != "1" {
		fmt.Println("containers: GPUSCALE_IMAGES is not 1; the image tests run through `make test-images` (part of `make test`)")
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if root, err = filepath.Abs("../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	containersConf = filepath.Join(root, "hack/containers.conf")
	out, err := exec.Command(filepath.Join(root, "hack/version.sh")).Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "containers: hack/version.sh: %v\n", err)
		return 1
	}
	tag = strings.TrimSpace(string(out))
	dir, err := os.MkdirTemp("", "gpuscale-containers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// The chart's adapter is the one under test: the environment registers
	// it (deploy/manifests' APIServices, RBAC and ServiceAccount) but does
	// not start a local one.
	env, err = devenv.Up(ctx, devenv.Options{Dir: dir, Nodes: 1, GPUsPerNode: 8, Logger: log, ExternalAdapter: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "containers: environment: %v\n(logs in %s)\n", err, filepath.Join(dir, "logs"))
		return 1
	}
	code := m.Run()
	if err := env.Down(); err != nil {
		fmt.Fprintf(os.Stderr, "containers: teardown: %v\n", err)
	}
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Printf("containers: logs kept in %s\n", dir)
	}
	return code
}

func needEnv(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip("GPUSCALE_IMAGES is not 1")
	}
}

// renderChart is the chart as `helm install` would apply it, with the
// images `make images` built and the values this machine needs (each
// named with its reason at the call), decoded into objects.
func renderChart(t *testing.T, values ...string) []*unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	helm, err := exec.CommandContext(ctx, filepath.Join(root, "hack/helm.sh")).Output()
	if err != nil {
		t.Fatalf("hack/helm.sh: %v", err)
	}
	args := []string{"template", release, filepath.Join(root, chartPath), "--namespace", devenv.Namespace,
		"--set", "global.imageRegistry=localhost",
		// --set-string: the tag is git describe's, which can be an
		// all-digit hash (9725194) that --set would make a number.
		"--set", "adapter.image.repository=gpuscale-adapter", "--set-string", "adapter.image.tag=" + tag,
		"--set", "exporter.image.repository=gpuscale-exporter", "--set-string", "exporter.image.tag=" + tag}
	for _, v := range values {
		args = append(args, "--set", v)
	}
	cmd := exec.CommandContext(ctx, strings.TrimSpace(string(helm)), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v: %s", err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding helm template: %v", err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs
}

// find converts the rendered object of kind and name into out.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("the chart renders no %s %s", kind, name)
}

func container(t *testing.T, pod corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range pod.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s in the rendered pod", name)
	return corev1.Container{}
}

func daemonSet(t *testing.T, objs []*unstructured.Unstructured, name string) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", name, &ds)
	return &ds
}

func deployment(t *testing.T, objs []*unstructured.Unstructured, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	find(t, objs, "Deployment", name, &d)
	return &d
}

// poll calls cond every 250ms until it returns nil or timeout passes.
func poll(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %v", what, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

package containers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// runSpec is one container of a rendered pod, turned into a podman run as
// the kubelet would start it. Every field the test cannot honour fails the
// test (unsupported), so a chart change that needs something new is
// noticed rather than silently dropped.
type runSpec struct {
	name string
	pod  corev1.PodSpec
	c    corev1.Container
	// volumes maps each volume name of the pod to the host directory that
	// stands for it; the caller fills it (a secret's files, an emptyDir).
	volumes map[string]string
	// env adds variables the kubelet itself sets (the in-cluster API
	// server's address) and resolves the pod's fieldRefs.
	env map[string]string
	// fieldRefs gives the value of each fieldRef path the pod uses.
	fieldRefs map[string]string
	// kubeletMounts are the read-only mounts the kubelet adds (the
	// ServiceAccount token), container path to host directory.
	kubeletMounts map[string]string
}

// podmanArgs is `podman run` for s: the image's entrypoint with the
// container's command and args, its user, its read-only root, its
// capabilities, no-new-privileges and seccomp profile, its environment and
// its mounts. The network is the host's: the control plane, the exporter
// pods and the probes all live on loopback.
func (s runSpec) podmanArgs(imageUser string) ([]string, error) {
	args := []string{"run", "--detach", "--name", s.name, "--network=host", "--pull=never",
		// Kubernetes mounts nothing on /tmp or /run of a read-only root;
		// podman does unless told not to.
		"--read-only-tmpfs=false"}
	psc := s.pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	sc := s.c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	user, group := sc.RunAsUser, sc.RunAsGroup
	if user == nil {
		user = psc.RunAsUser
	}
	if group == nil {
		group = psc.RunAsGroup
	}
	nonRoot := sc.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = psc.RunAsNonRoot
	}
	switch {
	case user != nil && group != nil:
		args = append(args, "--user", fmt.Sprintf("%d:%d", *user, *group))
	case user != nil:
		args = append(args, "--user", strconv.FormatInt(*user, 10))
	case group != nil:
		return nil, fmt.Errorf("unsupported: runAsGroup without runAsUser")
	}
	// The kubelet refuses to start a runAsNonRoot container whose user is
	// root or, taken from the image, not numeric.
	if nonRoot != nil && *nonRoot {
		effective := imageUser
		if user != nil {
			effective = strconv.FormatInt(*user, 10)
		}
		uid, err := strconv.Atoi(strings.SplitN(effective, ":", 2)[0])
		if err != nil || uid == 0 {
			return nil, fmt.Errorf("runAsNonRoot, but the container would run as %q (the kubelet refuses to start it)", effective)
		}
	}
	if len(psc.SupplementalGroups) > 0 || psc.FSGroup != nil {
		return nil, fmt.Errorf("unsupported: supplementalGroups or fsGroup")
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	if sc.Privileged != nil && *sc.Privileged {
		args = append(args, "--privileged")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if sc.Capabilities != nil {
		for _, c := range sc.Capabilities.Drop {
			args = append(args, "--cap-drop", string(c))
		}
		for _, c := range sc.Capabilities.Add {
			args = append(args, "--cap-add", string(c))
		}
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp != nil {
		switch seccomp.Type {
		case corev1.SeccompProfileTypeRuntimeDefault: // podman's default profile
		case corev1.SeccompProfileTypeUnconfined:
			args = append(args, "--security-opt", "seccomp=unconfined")
		default:
			return nil, fmt.Errorf("unsupported seccomp profile %s", seccomp.Type)
		}
	}
	for _, e := range s.c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				return nil, fmt.Errorf("unsupported: env %s from anything but a fieldRef", e.Name)
			}
			var ok bool
			if v, ok = s.fieldRefs[e.ValueFrom.FieldRef.FieldPath]; !ok {
				return nil, fmt.Errorf("unsupported: env %s from fieldRef %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		}
		args = append(args, "--env", e.Name+"="+v)
	}
	if len(s.c.EnvFrom) > 0 {
		return nil, fmt.Errorf("unsupported: envFrom")
	}
	for k, v := range s.env {
		args = append(args, "--env", k+"="+v)
	}
	for _, m := range s.c.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			return nil, fmt.Errorf("unsupported: subPath on mount %s", m.Name)
		}
		dir, ok := s.volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("mount %s names a volume the test has no directory for", m.Name)
		}
		opt := "rw"
		if m.ReadOnly {
			opt = "ro"
		}
		args = append(args, "--volume", dir+":"+m.MountPath+":"+opt)
	}
	for path, dir := range s.kubeletMounts {
		args = append(args, "--volume", dir+":"+path+":ro")
	}
	if s.c.WorkingDir != "" {
		args = append(args, "--workdir", s.c.WorkingDir)
	}
	switch len(s.c.Command) {
	case 0:
	case 1:
		args = append(args, "--entrypoint", s.c.Command[0])
	default:
		return nil, fmt.Errorf("unsupported: a command of several words")
	}
	args = append(args, s.c.Image)
	return append(args, s.c.Args...), nil
}

// volumeDirs makes a host directory for each volume of pod: a secret's
// files from secrets (by secret name), an empty world-writable directory
// for an emptyDir (as the kubelet makes it), and for a hostPath the
// directory hostPaths names. Any other kind fails.
func volumeDirs(t *testing.T, pod corev1.PodSpec, secrets map[string]map[string][]byte, hostPaths map[string]string) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for _, v := range pod.Volumes {
		dir := filepath.Join(t.TempDir(), v.Name)
		switch {
		case v.Secret != nil:
			files, ok := secrets[v.Secret.SecretName]
			if !ok {
				t.Fatalf("volume %s: no content for Secret %s", v.Name, v.Secret.SecretName)
			}
			mkdir(t, dir, 0o755)
			for name, b := range files {
				// The kubelet's default secret file mode.
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		case v.EmptyDir != nil:
			mkdir(t, dir, 0o777)
		case v.HostPath != nil:
			d, ok := hostPaths[v.HostPath.Path]
			if !ok {
				t.Fatalf("volume %s: no stand-in for hostPath %s", v.Name, v.HostPath.Path)
			}
			dir = d
		default:
			t.Fatalf("volume %s: unsupported kind", v.Name)
		}
		dirs[v.Name] = dir
	}
	return dirs
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	// MkdirAll's mode passes through the umask, and the container's user
	// must traverse every directory above a mount's files.
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		m := os.FileMode(0o755)
		if d == dir {
			m = mode
		}
		if err := os.Chmod(d, m); err != nil {
			t.Fatal(err)
		}
	}
}

// podman runs podman with this repository's containers.conf.
func podman(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+containersConf)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// startContainer runs s under podman and removes it when the test ends,
// logging its output first if the test failed.
func startContainer(t *testing.T, s runSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	imageUser, err := podman(ctx, "image", "inspect", "--format", "{{.Config.User}}", s.c.Image)
	if err != nil {
		t.Fatalf("image %s (run `make images` first): %v", s.c.Image, err)
	}
	args, err := s.podmanArgs(strings.TrimSpace(string(imageUser)))
	if err != nil {
		t.Fatalf("container %s as rendered: %v", s.c.Name, err)
	}
	_, _ = podman(ctx, "rm", "--force", "--ignore", s.name)
	t.Logf("podman %s", strings.Join(args, " "))
	if _, err := podman(ctx, args...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if t.Failed() {
			logs, _ := exec.CommandContext(ctx, "podman", "logs", "--tail", "60", s.name).CombinedOutput()
			t.Logf("logs of %s:\n%s", s.name, logs)
		}
		if _, err := podman(ctx, "rm", "--force", "--time", "5", s.name); err != nil {
			t.Errorf("removing %s: %v", s.name, err)
		}
	})
}

// containerState is "running" or why not (exited with its code).
func containerState(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := podman(ctx, "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(out))
}

// containerPID is the host PID of the container's process.
func containerPID(t *testing.T, name string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := podman(ctx, "inspect", "--format", "{{.State.Pid}}", name)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid == 0 {
		t.Fatalf("pid of %s: %q %v", name, out, err)
	}
	return pid
}

// containerPort resolves a probe's port, by number or by the name of one
// of c's ports.
func containerPort(c corev1.Container, p corev1.HTTPGetAction) (int32, error) {
	if p.Port.StrVal == "" {
		return p.Port.IntVal, nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.Port.StrVal {
			return cp.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("probe port %q names no port of container %s", p.Port.StrVal, c.Name)
}

// replaceArg swaps the arg starting with prefix for repl, failing if the
// chart no longer renders such an arg (the deviation would be stale).
func replaceArg(t *testing.T, args []string, prefix, repl string) []string {
	t.Helper()
	out := make([]string, 0, len(args))
	found := false
	for _, a := range args {
		if strings.HasPrefix(a, prefix) {
			a, found = repl, true
		}
		out = append(out, a)
	}
	if !found {
		t.Fatalf("the rendered args %q have no %s...: update this deviation", args, prefix)
	}
	return out
}

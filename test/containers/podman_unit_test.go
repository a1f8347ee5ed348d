package containers

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestPodmanArgs: the translation keeps what would break a container in a
// cluster, and refuses what it cannot reproduce. It needs no podman.
func TestPodmanArgs(t *testing.T) {
	yes, no := true, false
	root, nonroot := int64(0), int64(65532)
	base := func() runSpec {
		return runSpec{name: "x", c: corev1.Container{Name: "c", Image: "img", Args: []string{"--a=1"}}}
	}
	for _, tc := range []struct {
		name    string
		edit    func(*runSpec)
		want    []string // consecutive args that must appear
		wantErr string
	}{
		{name: "image then args", want: []string{"img --a=1"}},
		{name: "read-only root, no tmpfs", edit: func(s *runSpec) {
			s.c.SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: &yes}
		}, want: []string{"--read-only-tmpfs=false", "--read-only"}},
		{name: "capabilities and no-new-privileges", edit: func(s *runSpec) {
			s.c.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no,
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
		}, want: []string{"--security-opt no-new-privileges", "--cap-drop ALL", "--cap-add NET_BIND_SERVICE"}},
		{name: "pod user and group", edit: func(s *runSpec) {
			s.pod.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &nonroot, RunAsGroup: &nonroot, RunAsNonRoot: &yes}
		}, want: []string{"--user 65532:65532"}},
		{name: "container user wins", edit: func(s *runSpec) {
			s.pod.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &nonroot}
			s.c.SecurityContext = &corev1.SecurityContext{RunAsUser: &root}
		}, want: []string{"--user 0"}},
		{name: "runAsNonRoot as root", edit: func(s *runSpec) {
			s.pod.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &root, RunAsNonRoot: &yes}
		}, wantErr: "kubelet refuses"},
		{name: "runAsNonRoot on a root image", edit: func(s *runSpec) {
			s.pod.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes}
		}, wantErr: "kubelet refuses"},
		{name: "read-only mount", edit: func(s *runSpec) {
			s.c.VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/m", ReadOnly: true}}
			s.volumes = map[string]string{"v": "/host"}
		}, want: []string{"--volume /host:/m:ro"}},
		{name: "mount of an unknown volume", edit: func(s *runSpec) {
			s.c.VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/m"}}
		}, wantErr: "no directory"},
		{name: "fieldRef env", edit: func(s *runSpec) {
			s.c.Env = []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}
			s.fieldRefs = map[string]string{"spec.nodeName": "n1"}
		}, want: []string{"--env NODE=n1"}},
		{name: "unknown fieldRef", edit: func(s *runSpec) {
			s.c.Env = []corev1.EnvVar{{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
		}, wantErr: "fieldRef status.podIP"},
		{name: "command", edit: func(s *runSpec) { s.c.Command = []string{"/bin/x"} }, want: []string{"--entrypoint /bin/x img --a=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			if tc.edit != nil {
				tc.edit(&s)
			}
			args, err := s.podmanArgs("0")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			line := " " + strings.Join(args, " ") + " "
			for _, w := range tc.want {
				if !strings.Contains(line, " "+w+" ") {
					t.Errorf("podman %s\nlacks %q", line, w)
				}
			}
		})
	}
}

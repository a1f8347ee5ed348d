package processpods

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	uid   = "0b1d4c2e-8f3a-4d5b-9c6e-7f8a9b0c1d2e"
	uidSd = "0b1d4c2e_8f3a_4d5b_9c6e_7f8a9b0c1d2e"
	ctr   = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		file string
		want CgroupContainer
		err  error
	}{{
		name: "cgroup v1, cgroupfs driver, burstable",
		file: "12:pids:/kubepods/burstable/pod" + uid + "/" + ctr + "\n" +
			"11:memory:/kubepods/burstable/pod" + uid + "/" + ctr + "\n1:name=systemd:/kubepods/burstable/pod" + uid + "/" + ctr + "\n",
		want: CgroupContainer{PodUID: uid, ID: ctr},
	}, {
		name: "cgroup v1, cgroupfs driver, guaranteed",
		file: "11:memory:/kubepods/pod" + uid + "/" + ctr + "\n",
		want: CgroupContainer{PodUID: uid, ID: ctr},
	}, {
		name: "cgroup v2, systemd driver, containerd",
		file: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + ctr + ".scope\n",
		want: CgroupContainer{PodUID: uid, ID: ctr},
	}, {
		name: "cgroup v2, systemd driver, CRI-O, guaranteed",
		file: "0::/kubepods.slice/kubepods-pod" + uidSd + ".slice/crio-" + ctr + ".scope\n",
		want: CgroupContainer{PodUID: uid, ID: ctr},
	}, {
		name: "cgroup v2, systemd driver, besteffort, under kind's kubelet slice",
		file: "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uidSd + ".slice/cri-containerd-" + ctr + ".scope\n",
		want: CgroupContainer{PodUID: uid, ID: ctr},
	}, {
		name: "cgroup v2, cgroupfs driver",
		file: "0::/kubepods/besteffort/pod" + uid + "/" + ctr + "\n",
		want: CgroupContainer{PodUID: uid, ID: ctr},
	}, {
		name: "cgroup v1 with a hybrid v2 line first",
		file: "0::/\n4:devices:/kubepods/burstable/pod" + uid + "/" + ctr + "\n",
		want: CgroupContainer{PodUID: uid, ID: ctr},
	}, {
		name: "pod cgroup without a container (pause-less sandbox process)",
		file: "0::/kubepods/burstable/pod" + uid + "\n",
		want: CgroupContainer{PodUID: uid},
	}, {
		name: "host daemon",
		file: "0::/system.slice/nvidia-persistenced.service\n",
		err:  ErrNotInPod,
	}, {
		name: "host process in the root cgroup",
		file: "0::/\n",
		err:  ErrNotInPod,
	}, {
		name: "docker container outside Kubernetes",
		file: "0::/system.slice/docker-" + ctr + ".scope\n",
		err:  ErrNotInPod,
	}, {
		name: "malformed pod UID",
		file: "0::/kubepods/burstable/podnot-a-uid/" + ctr + "\n",
		err:  ErrNotInPod,
	}, {
		name: "garbage",
		file: "\x00\x01::::\nno colons here\n",
		err:  ErrNotInPod,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCgroup(strings.NewReader(tt.file))
			if !errors.Is(err, tt.err) || got != tt.want {
				t.Errorf("Parse = %+v, %v; want %+v, %v", got, err, tt.want, tt.err)
			}
		})
	}
}

func TestReaderContainerOf(t *testing.T) {
	root := t.TempDir()
	write := func(pid, content string) {
		t.Helper()
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("4242", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+uidSd+".slice/cri-containerd-"+ctr+".scope\n")
	write("7", "0::/system.slice/sshd.service\n")
	r := CgroupReader{Root: root}

	if c, err := r.ContainerOf(4242); err != nil || c != (CgroupContainer{PodUID: uid, ID: ctr}) {
		t.Errorf("ContainerOf(4242) = %+v, %v", c, err)
	}
	if _, err := r.ContainerOf(7); !errors.Is(err, ErrNotInPod) {
		t.Errorf("ContainerOf(7) error = %v, want ErrNotInPod", err)
	}
	// A process that exited between the driver's list and the read.
	if _, err := r.ContainerOf(99); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "pid 99") {
		t.Errorf("ContainerOf(99) error = %v, want a wrapped ErrNotExist naming the pid", err)
	}
}

// The cgroup half: which Kubernetes container a host process runs in,
// from its /proc/<pid>/cgroup: the pod UID and the container ID that the
// kubelet and the container runtime put in the cgroup path.
//
// It reads cgroup v1 and v2 files and the path forms of the cgroupfs and
// systemd cgroup drivers under containerd and CRI-O. A process outside
// every pod (a host daemon, a container not run by the kubelet) is
// ErrNotInPod, not a guess.

package processpods

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNotInPod is returned for a process whose cgroup names no pod.
var ErrNotInPod = errors.New("processpods: process is in no pod's cgroup")

// CgroupContainer is where a process runs.
type CgroupContainer struct {
	// PodUID is the pod's UID, with dashes ("0b1d...-...").
	PodUID string
	// ID is the runtime's container ID (64 hex digits); "" when the
	// process is in the pod's cgroup but not a container's (rare).
	ID string
}

// maxCgroupFile bounds what is read of one cgroup file: a process in
// hundreds of v1 hierarchies stays far below it.
const maxCgroupFile = 64 << 10

// CgroupReader reads /proc/<pid>/cgroup under Root.
type CgroupReader struct {
	// Root is the proc file system's mount point: "/proc" on the host,
	// "/host/proc" in a container that mounts the host's.
	Root string
}

// ContainerOf returns the container pid runs in.
func (r CgroupReader) ContainerOf(pid uint32) (CgroupContainer, error) {
	f, err := os.Open(filepath.Join(r.Root, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return CgroupContainer{}, fmt.Errorf("processpods: pid %d: %w", pid, err)
	}
	defer f.Close()
	c, err := ParseCgroup(io.LimitReader(f, maxCgroupFile))
	if err != nil {
		return CgroupContainer{}, fmt.Errorf("processpods: pid %d: %w", pid, err)
	}
	return c, nil
}

// ParseCgroup reads a /proc/<pid>/cgroup file. Every line is
// "hierarchy-ID:controllers:path"; cgroup v2 has the one line "0::path".
// The first path that names a pod wins: on cgroup v1 every controller's
// path names the same container.
func ParseCgroup(r io.Reader) (CgroupContainer, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxCgroupFile)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if c, ok := parsePath(parts[2]); ok {
			return c, nil
		}
	}
	if err := sc.Err(); err != nil {
		return CgroupContainer{}, fmt.Errorf("read cgroup file: %w", err)
	}
	return CgroupContainer{}, ErrNotInPod
}

// parsePath finds the pod and container in one cgroup path. The forms:
//
//	cgroupfs:  /kubepods/burstable/pod<uid>/<id>
//	           /kubepods/pod<uid>/<id>                       (guaranteed QoS)
//	systemd:   /kubepods.slice/kubepods-burstable.slice/
//	           kubepods-burstable-pod<uid_underscored>.slice/cri-containerd-<id>.scope
//	           ... /crio-<id>.scope, ... /docker-<id>.scope
//
// and any prefix before kubepods (a nested runtime, kind's /kubelet.slice).
func parsePath(path string) (CgroupContainer, bool) {
	var c CgroupContainer
	for _, seg := range strings.Split(path, "/") {
		switch {
		case c.PodUID == "":
			c.PodUID = podUID(seg)
		default:
			if id := containerID(seg); id != "" {
				c.ID = id
				return c, true
			}
		}
	}
	return c, c.PodUID != ""
}

// podUID returns the pod UID a path segment names, "" if none:
// "pod<uid>" (cgroupfs) or "kubepods[-<qos>]-pod<uid with underscores>.slice"
// (systemd).
func podUID(seg string) string {
	var uid string
	switch {
	case strings.HasPrefix(seg, "pod"):
		uid = seg[len("pod"):]
	case strings.Contains(seg, "kubepods") && strings.HasSuffix(seg, ".slice"):
		i := strings.LastIndex(seg, "-pod")
		if i < 0 {
			return ""
		}
		uid = strings.ReplaceAll(strings.TrimSuffix(seg[i+len("-pod"):], ".slice"), "_", "-")
	}
	if !isUID(uid) {
		return ""
	}
	return uid
}

// isUID checks the 8-4-4-4-12 hex form of a Kubernetes UID.
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, ch := range s {
		switch i {
		case 8, 13, 18, 23:
			if ch != '-' {
				return false
			}
		default:
			if !isHex(ch) {
				return false
			}
		}
	}
	return true
}

// containerID returns the container ID a path segment names, "" if none:
// a bare ID (cgroupfs) or "<runtime>-<id>.scope" (systemd).
func containerID(seg string) string {
	if s, ok := strings.CutSuffix(seg, ".scope"); ok {
		i := strings.LastIndexByte(s, '-')
		if i < 0 {
			return ""
		}
		seg = s[i+1:]
	}
	if len(seg) != 64 {
		return ""
	}
	for _, ch := range seg {
		if !isHex(ch) {
			return ""
		}
	}
	return seg
}

func isHex(ch rune) bool {
	return ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'f'
}

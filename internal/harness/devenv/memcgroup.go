package devenv

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

// memoryCgroup is a memory cgroup of its own for the adapter, limited as
// the chart's resources.limits.memory limits its container: the kernel
// ends the adapter if it passes the limit, and the adapter reads the limit
// to set its Go soft limit (--memory-limit-ratio), as it does in a pod.
// Both cgroup versions: v1's memory hierarchy and v2's unified one.
type memoryCgroup struct {
	dir string
	v2  bool
}

// newMemoryCgroup makes a cgroup named name under the memory hierarchy's
// root and limits it to limit bytes. It needs root and a writable cgroup
// file system, as a container run with its own cgroup namespace has.
func newMemoryCgroup(name string, limit int64) (*memoryCgroup, error) {
	root, v2, err := memoryHierarchy()
	if err != nil {
		return nil, err
	}
	cg := &memoryCgroup{dir: filepath.Join(root, name), v2: v2}
	if err := os.Mkdir(cg.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("devenv: memory cgroup for the adapter's limit: %w", err)
	}
	file := "memory.limit_in_bytes"
	if v2 {
		file = "memory.max"
	}
	if err := os.WriteFile(filepath.Join(cg.dir, file), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		_ = os.Remove(cg.dir)
		return nil, fmt.Errorf("devenv: limit the adapter's memory cgroup: %w", err)
	}
	return cg, nil
}

// memoryHierarchy finds where the memory controller is mounted, from
// /proc/self/mountinfo: v1's "memory" hierarchy if there is one, else the
// unified v2 hierarchy.
func memoryHierarchy() (root string, v2 bool, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	return parseMemoryHierarchy(f)
}

func parseMemoryHierarchy(mountinfo io.Reader) (root string, v2 bool, err error) {
	var unified string
	sc := bufio.NewScanner(mountinfo)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, after := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(after) < 3 {
			continue
		}
		switch after[0] {
		case "cgroup":
			for _, opt := range strings.Split(after[2], ",") {
				if opt == "memory" {
					return fields[4], false, nil
				}
			}
		case "cgroup2":
			unified = fields[4]
		}
	}
	if err := sc.Err(); err != nil {
		return "", false, err
	}
	if unified == "" {
		return "", false, errors.New("devenv: no memory cgroup hierarchy is mounted")
	}
	return unified, true, nil
}

// procsFile is where a process is moved into the cgroup.
func (cg *memoryCgroup) procsFile() string { return filepath.Join(cg.dir, "cgroup.procs") }

// Peak is the most memory the cgroup has held, in bytes: its processes'
// anonymous memory and the page cache charged to it.
func (cg *memoryCgroup) Peak() (int64, error) {
	file := "memory.max_usage_in_bytes"
	if cg.v2 {
		file = "memory.peak"
	}
	return readInt(filepath.Join(cg.dir, file))
}

// OOMKills is how many times the kernel killed a process of the cgroup
// for passing its limit.
func (cg *memoryCgroup) OOMKills() (int64, error) {
	file := "memory.oom_control"
	if cg.v2 {
		file = "memory.events"
	}
	raw, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no oom_kill count", file)
}

// remove deletes the cgroup once its processes have exited.
func (cg *memoryCgroup) remove() error { return os.Remove(cg.dir) }

func readInt(path string) (int64, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
}

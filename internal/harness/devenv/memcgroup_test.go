package devenv

import (
	"strings"
	"testing"
)

func TestParseMemoryHierarchy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mountinfo string
		root      string
		v2        bool
		err       bool
	}{
		{name: "v1, memory beside other controllers",
			mountinfo: "10:31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
				"11:32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
				"14:35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n",
			root: "/sys/fs/cgroup/memory"},
		{name: "v1 memory wins over a hybrid's unified mount",
			mountinfo: "20:40 31 0:40 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n" +
				"21:41 31 0:41 / /sys/fs/cgroup/memory,cpu rw - cgroup cgroup rw,cpu,memory\n",
			root: "/sys/fs/cgroup/memory,cpu"},
		{name: "v2 only",
			mountinfo: "29:26 0:26 0:26 / /sys/fs/cgroup rw,nosuid,nodev - cgroup2 cgroup2 rw,nsdelegate\n",
			root:      "/sys/fs/cgroup", v2: true},
		{name: "a cgroup v1 mount without memory is not it",
			mountinfo: "11:32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n",
			err:       true},
		{name: "nothing mounted", mountinfo: "1:1 0:1 / / rw - ext4 /dev/sda1 rw\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, v2, err := parseMemoryHierarchy(strings.NewReader(tc.mountinfo))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want an error: %v", err, tc.err)
			}
			if root != tc.root || v2 != tc.v2 {
				t.Fatalf("got (%q, v2 %v), want (%q, v2 %v)", root, v2, tc.root, tc.v2)
			}
		})
	}
}

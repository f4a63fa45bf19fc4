package cgroup

import (
	"errors"
	"strings"
	"testing"
)

// The broker finds its own cgroups where the machine has them: v1 when
// memory and pids have hierarchies (even beside an empty unified one, as
// on hybrid systems), the unified hierarchy otherwise, a container's
// mount of a subtree relative to its root; and no cgroup file system is
// said as such.
func TestLocate_FindsTheBrokersOwnCgroups(t *testing.T) {
	const hybridMounts = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	const hybridSelf = `9:name=systemd:/
8:pids:/
4:memory:/process_api/ccba
2:cpuacct:/
1:cpu:/
0::/
`
	const unifiedMounts = `25 20 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	for _, tc := range []struct {
		name, self, mounts string
		want               string // layout.String(), or the error's end
	}{
		{"hybrid, v1 controllers", hybridSelf, hybridMounts,
			"cgroup v1: memory at /sys/fs/cgroup/memory/process_api/ccba, pids at /sys/fs/cgroup/pids, cpu at /sys/fs/cgroup/cpu, cpuacct at /sys/fs/cgroup/cpuacct"},
		{"systemd, unified", "0::/system.slice/acp-broker.service\n", unifiedMounts,
			"cgroup v2 at /sys/fs/cgroup/system.slice/acp-broker.service"},
		{"v1, cpu and cpuacct together", "5:cpu,cpuacct:/a\n4:memory:/a\n3:pids:/a\n",
			"1 0 0:1 / /cg/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n2 0 0:2 / /cg/memory rw - cgroup cgroup rw,memory\n3 0 0:3 / /cg/pids rw - cgroup cgroup rw,pids\n",
			"cgroup v1: memory at /cg/memory/a, pids at /cg/pids/a, cpu at /cg/cpu,cpuacct/a"},
		{"a container's mount of its subtree", "0::/machine/c1/app\n",
			"7 1 0:5 /machine/c1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			"cgroup v2 at /sys/fs/cgroup/app"},
		{"a mount point with a space", "0::/x\n", `7 1 0:5 / /mnt/my\040cgroups rw - cgroup2 cgroup2 rw` + "\n",
			"cgroup v2 at /mnt/my cgroups/x"},
		{"no cgroup file system", "0::/\n", "1 0 0:1 / / rw - ext4 /dev/vda rw\n",
			"no cgroup file system is mounted"},
		{"v1 without pids, no unified", "4:memory:/a\n", "2 0 0:2 / /cg/memory rw - cgroup cgroup rw,memory\n",
			"cgroup v1 has no pids hierarchy mounted where the broker sees it"},
		{"the own cgroup outside the mount", "0::/elsewhere\n", "7 1 0:5 /machine/c1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			"the broker's own cgroup is not under a cgroup file system it sees"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := locate(tc.self, tc.mounts)
			if err != nil {
				if !errors.Is(err, ErrUnavailable) || !strings.HasSuffix(err.Error(), tc.want) {
					t.Fatalf("error %v, want one ending %q", err, tc.want)
				}
				return
			}
			if got := l.String(); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

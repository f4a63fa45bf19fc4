package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// familiesVar, in the test binary's environment, has it run its
// arguments confined to those address families (names separated by
// spaces), with no new privileges: as systemd runs a unit with
// RestrictAddressFamilies= and NoNewPrivileges=yes, a socket(2) of any
// other family fails with EAFNOSUPPORT.
const familiesVar = "BROKER_TEST_ADDRESS_FAMILIES"

// addressFamilies are the families a unit may name, by name.
var addressFamilies = map[string]uint32{"AF_UNIX": unix.AF_UNIX, "AF_INET": unix.AF_INET, "AF_INET6": unix.AF_INET6,
	"AF_NETLINK": unix.AF_NETLINK, "AF_PACKET": unix.AF_PACKET}

// execConfined runs the program os.Args names, confined as familiesVar
// says, when the variable is set; it does not return then.
func execConfined() {
	names, ok := os.LookupEnv(familiesVar)
	if !ok {
		return
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "confined:", err)
		os.Exit(125)
	}
	if runtime.GOARCH != "amd64" || len(os.Args) < 2 {
		fail(fmt.Errorf("needs amd64 and a program (%s, %q)", runtime.GOARCH, os.Args))
	}
	// The filter is the thread's, and execve keeps it: the thread that
	// installs it must be the one that runs the program.
	runtime.LockOSThread()
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4}, // arch
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.AUDIT_ARCH_X86_64, Jt: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_KILL_PROCESS},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0},                       // syscall number
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_SOCKET, Jf: 0}, // patched below
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 16},                      // the family: args[0], low word
	}
	var allowed []uint32
	for _, n := range strings.Fields(names) {
		f, ok := addressFamilies[n]
		if !ok {
			fail(fmt.Errorf("unknown address family %q", n))
		}
		allowed = append(allowed, f)
	}
	// Each allowed family jumps to the last instruction (allow); past
	// them, the refusal.
	for i, f := range allowed {
		prog = append(prog, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: f, Jt: uint8(len(allowed) - i)})
	}
	prog = append(prog,
		unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)},
		unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW})
	prog[4].Jf = uint8(len(prog) - 1 - 5) // not socket(2): allow
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail(err)
	}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		fail(err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, familiesVar+"=") })
	path, err := exec.LookPath(os.Args[1])
	if err != nil {
		fail(err)
	}
	fail(syscall.Exec(path, os.Args[1:], env))
}

// The shipped unit's RestrictAddressFamilies= lets bubblewrap give an
// agent a network namespace of its own (agent.sandbox_network = false,
// --unshare-net), which needs a netlink socket to bring its loopback
// up: check-config's trial of the sandbox passes confined to the unit's
// families, and fails without AF_NETLINK, so the confinement is real.
func TestPackaging_TheUnitsAddressFamiliesLetTheSandboxHaveItsOwnNetwork(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the address families' filter is written for amd64")
	}
	unit, err := os.ReadFile("../../packaging/broker.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RestrictAddressFamilies=(.*)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("the unit has no RestrictAddressFamilies=")
	}
	families := strings.Fields(string(m[1]))
	bin := brokerBin(t)
	config := writeConfig(t, "")
	check := func(families []string) (string, error) {
		cmd := exec.Command(os.Args[0], bin, "check-config", "--config", config)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "BROKER_AGENT_SANDBOX_NETWORK=false",
			familiesVar + "=" + strings.Join(families, " ")}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := check(families); err != nil || !strings.Contains(out, "configuration is valid") {
		t.Errorf("check-config confined to the unit's address families (%s): %v\n%s", strings.Join(families, " "), err, out)
	}
	without := slices.DeleteFunc(slices.Clone(families), func(f string) bool { return f == "AF_NETLINK" })
	if out, err := check(without); err == nil || !strings.Contains(out, "bubblewrap could not start a program") {
		t.Errorf("check-config confined to %s passed: the confinement is not in force, and the test cannot tell\n%s", strings.Join(without, " "), out)
	}
}

package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// check-config, through the binary, refuses a token the project's
// examples show, naming where it was given, and warns of the API served
// beyond loopback, where its bearer tokens cross the network in plain
// HTTP; the configuration is still valid then.
func TestCheckConfig_RefusesAPublishedTokenAndWarnsOfTheAPIBeyondLoopback(t *testing.T) {
	bin := brokerBin(t)
	config := writeConfig(t, "")
	check := func(env ...string) (int, string) {
		c := exec.Command(bin, "check-config", "--config", config)
		c.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
		out, _ := c.CombinedOutput()
		return c.ProcessState.ExitCode(), string(out)
	}
	code, out := check("BROKER_API_LISTEN=127.0.0.1:0", "BROKER_API_TOKEN=demo-token-change-me-0123456789")
	if code != 2 || !strings.Contains(out, "BROKER_API_TOKEN is the example token the broker's own documentation shows") {
		t.Errorf("the published token: exit %d, %s", code, out)
	}
	code, out = check("BROKER_API_LISTEN=0.0.0.0:0", "BROKER_API_TOKEN=a-token-of-its-own-0123456789")
	if code != 0 || !strings.Contains(out, `broker: warning: api.listen = "0.0.0.0:0" is beyond loopback`) || !strings.Contains(out, "configuration is valid") {
		t.Errorf("the API on every interface: exit %d, %s", code, out)
	}
	code, out = check("BROKER_API_LISTEN=127.0.0.1:0", "BROKER_API_TOKEN=a-token-of-its-own-0123456789")
	if code != 0 || strings.Contains(out, "api.listen") {
		t.Errorf("the API on loopback: exit %d, %s", code, out)
	}
}

package adapter

import (
	"strings"
	"testing"

	"acpbroker/netproxy"
)

// A refusal for a host names it and why; one for too many connections
// at once, which has no host, says that alone.
func TestRefusalNotice_NamesTheHostOrSaysWhy(t *testing.T) {
	got := refusalNotice(netproxy.Refusal{Host: "pypi.org", Port: 443, Reason: "not in agents.py.allow_hosts"})
	if !strings.Contains(got, "pypi.org:443") || !strings.Contains(got, "agents.py.allow_hosts") {
		t.Errorf("a host refused: %q", got)
	}
	got = refusalNotice(netproxy.Refusal{Reason: "too many connections open (at most 256)"})
	if strings.Contains(got, ":0") || !strings.Contains(got, "too many connections open") {
		t.Errorf("too many connections: %q", got)
	}
}

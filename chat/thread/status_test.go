package thread

import (
	"strings"
	"testing"
	"time"

	"acpbroker/adapter"
)

// /status names the agent host a thread's agent runs on, and no host for
// one that runs here.
func TestStatusText_NamesTheAgentHost(t *testing.T) {
	st := adapter.ThreadStatus{PID: 41, AgentUp: time.Minute, SessionID: "s1", Where: "gpu-1"}
	if got := statusText(st); !strings.Contains(got, "**Agent**: pid 41 on agent host `gpu-1`, up 1m0s") {
		t.Fatalf("status of a remote agent:\n%s", got)
	}
	st.Where = ""
	if got := statusText(st); !strings.Contains(got, "**Agent**: pid 41, up 1m0s") {
		t.Fatalf("status of a local agent:\n%s", got)
	}
}

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check-config names a schedule's bad expression by its key and exits
// 2; a good one passes.
func TestCheckConfig_NamesABadScheduleExpression(t *testing.T) {
	dir := t.TempDir()
	env := append(agentUserEnv(t, dir), "BROKER_AGENT_COMMAND="+fakeAgent, "BROKER_STATE_DIR="+filepath.Join(dir, "state"), "BROKER_AGENT_CWD="+filepath.Join(dir, "work"))
	for _, tc := range []struct {
		spec string
		code int
		want string
	}{
		{"0 25 * * *", 2, `schedules[0].schedule = "0 25 * * *" is not a schedule`},
		{"CRON_TZ=Nowhere/City 0 1 * * *", 2, `schedules[0].schedule = "CRON_TZ=Nowhere/City 0 1 * * *" is not a schedule`},
		{"CRON_TZ=Asia/Tokyo 0 9 * * 1-5", 0, "configuration is valid"},
	} {
		path := filepath.Join(dir, "broker.toml")
		text := "[chat]\nplatform = \"discord\"\n[discord]\ntoken = \"t\"\nallowed_channels = [\"100\"]\n" +
			"[[schedules]]\nname = \"nightly\"\nschedule = \"" + tc.spec + "\"\nchannel = \"100\"\nprompt = \"p\"\n"
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		code := run(context.Background(), []string{"check-config", "--config", path}, env, nil, &out, &out)
		if code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: status %d, %s\nwant %d with %q", tc.spec, code, out.String(), tc.code, tc.want)
		}
	}
}

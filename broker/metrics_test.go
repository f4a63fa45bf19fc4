package broker

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var updateMetrics = flag.Bool("update-metrics", false, "write testdata/metrics.txt from what the broker describes")

// The metrics a broker serving Discord and Slack exports keep their
// names, types, labels and help as dashboards, alerting rules and the
// README know them (testdata/metrics.txt; a type is given for each
// metric a scrape of a broker just opened holds, "-" for the others).
func TestMetrics_NamesTypesLabelsAndHelpStayAsExported(t *testing.T) {
	cfg, err := loadText(t, "[chat]\nplatform = [\"discord\", \"slack\"]\n[discord]\ntoken = \"t\"\nallow_all_channels = true\n[slack]\nbot_token = \"x\"\napp_token = \"y\"\nallow_all_channels = true\n"+
		"[agent]\ncommand = \""+fakeAgent+"\"\n[state]\ndir = \""+t.TempDir()+"\"\n")
	if err != nil {
		t.Fatal(err)
	}
	b := openBroker(t, cfg, Options{Logger: testLog(t)})
	families, err := b.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, f := range families {
		types[f.GetName()] = strings.ToLower(f.GetType().String())
	}
	var got strings.Builder
	for _, d := range b.Metrics().Descriptions() {
		if !strings.HasPrefix(d.Name, "acp_broker_") {
			continue // the Go and process collectors'
		}
		typ := types[d.Name]
		if typ == "" {
			typ = "-"
		}
		fmt.Fprintf(&got, "%s %s {%s} %s\n", d.Name, typ, strings.Join(d.Labels, ","), d.Help)
	}
	if *updateMetrics {
		if err := os.WriteFile("testdata/metrics.txt", []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("the metrics described are not those exported so far:\n%s\nwant:\n%s", got.String(), want)
	}
}

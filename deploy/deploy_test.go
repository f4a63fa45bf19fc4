package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"acpbroker/config"

	"go.yaml.in/yaml/v3"
)

// kube is the directory of the Kubernetes manifests.
const kube = "kubernetes"

// helmValues is the NATS chart's values: YAML, but no manifest.
const helmValues = "nats-values.yaml"

// object is one document of a manifest file.
type object struct {
	file string
	m    map[string]any
}

func (o object) kind() string { s, _ := get(o.m, "kind").(string); return s }
func (o object) name() string { s, _ := get(o.m, "metadata", "name").(string); return s }
func (o object) String() string {
	return fmt.Sprintf("%s: %s %s", o.file, o.kind(), o.name())
}

// get walks m by keys; nil where any step is missing.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// list is v as a list of maps (nil entries for anything else).
func list(v any) []map[string]any {
	items, _ := v.([]any)
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		m, _ := it.(map[string]any)
		out = append(out, m)
	}
	return out
}

// decodeAll decodes every document of a YAML file.
func decodeAll(path string) ([]map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if m != nil {
			docs = append(docs, m)
		}
	}
}

// manifestFiles are the manifest files under kubernetes/.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kube, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == helmValues })
	if len(files) < 8 {
		t.Fatalf("%d manifest files in %s", len(files), kube)
	}
	return files
}

// objects are the documents of every manifest file.
func objects(t *testing.T) []object {
	t.Helper()
	var out []object
	for _, f := range manifestFiles(t) {
		docs, err := decodeAll(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(docs) == 0 {
			t.Errorf("%s holds no document", f)
		}
		for _, m := range docs {
			out = append(out, object{file: filepath.Base(f), m: m})
		}
	}
	return out
}

// find is the one object of kind and name.
func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	t.Fatalf("no %s %s in %s", kind, name, kube)
	return object{}
}

// pods are the pod specs of the workloads, by the workload's name.
func pods(objs []object) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		switch o.kind() {
		case "Deployment", "StatefulSet", "DaemonSet", "Job":
			spec, _ := get(o.m, "spec", "template", "spec").(map[string]any)
			out[o.name()] = spec
		case "Pod":
			spec, _ := get(o.m, "spec").(map[string]any)
			out[o.name()] = spec
		}
	}
	return out
}

// containers are a pod's containers, init containers among them.
func containers(pod map[string]any) []map[string]any {
	return append(list(pod["initContainers"]), list(pod["containers"])...)
}

// Every manifest parses as YAML, each document an object with its
// apiVersion, kind and name; the chart's values parse too.
func TestManifests_ParseAsObjects(t *testing.T) {
	objs := objects(t)
	for _, o := range objs {
		if v, _ := get(o.m, "apiVersion").(string); v == "" {
			t.Errorf("%s has no apiVersion", o)
		}
		if o.kind() == "" || o.name() == "" {
			t.Errorf("%s has no kind or no metadata.name", o)
		}
	}
	for _, kind := range []string{"Namespace", "Deployment", "ConfigMap", "PersistentVolumeClaim", "Service", "Secret", "Kustomization"} {
		if !slices.ContainsFunc(objs, func(o object) bool { return o.kind() == kind }) {
			t.Errorf("no %s among the manifests", kind)
		}
	}
	if docs, err := decodeAll(filepath.Join(kube, helmValues)); err != nil || len(docs) != 1 {
		t.Errorf("%s: %d documents, %v", helmValues, len(docs), err)
	}
}

// kustomization.yaml names every manifest but the Secrets' example (which
// applying must not overwrite), and kubectl builds it where it is installed.
func TestManifests_KustomizationNamesEveryManifest(t *testing.T) {
	k := find(t, objects(t), "Kustomization", "acp-broker")
	var resources []string
	for _, r := range get(k.m, "resources").([]any) {
		resources = append(resources, r.(string))
	}
	for _, f := range manifestFiles(t) {
		base := filepath.Base(f)
		listed := slices.Contains(resources, base)
		switch base {
		case "kustomization.yaml":
		case "secrets.example.yaml":
			if listed {
				t.Errorf("kustomization.yaml applies %s, which would overwrite the real Secrets", base)
			}
		default:
			if !listed {
				t.Errorf("kustomization.yaml leaves out %s", base)
			}
		}
	}
	for _, r := range resources {
		if _, err := os.Stat(filepath.Join(kube, r)); err != nil {
			t.Errorf("kustomization.yaml names %s: %v", r, err)
		}
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl is not installed: the kustomization is not built")
		return
	}
	out, err := exec.Command(kubectl, "kustomize", kube).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	// Each object's kind is a line of its own, unindented.
	if n := bytes.Count(append([]byte("\n"), out...), []byte("\nkind: ")); n < 7 {
		t.Errorf("kubectl kustomize built %d objects:\n%s", n, out)
	}
}

// One broker holds its state: one replica, replaced rather than rolled,
// its state on the claim, its configuration from the ConfigMap, its
// tokens from Secrets; and every name a workload refers to is defined.
func TestManifests_BrokerIsOneReplicaReplacedWhole(t *testing.T) {
	objs := objects(t)
	b := find(t, objs, "Deployment", "acp-broker")
	if r, ok := get(b.m, "spec", "replicas").(int); !ok || r != 1 {
		t.Errorf("the broker's replicas = %v, want 1", get(b.m, "spec", "replicas"))
	}
	if s := get(b.m, "spec", "strategy", "type"); s != "Recreate" {
		t.Errorf("the broker's strategy is %v, want Recreate", s)
	}
	pod := pods(objs)["acp-broker"]
	var claim, configMap bool
	for _, v := range list(pod["volumes"]) {
		if get(v, "persistentVolumeClaim", "claimName") != nil {
			claim = true
		}
		if get(v, "configMap", "name") != nil {
			configMap = true
		}
	}
	if !claim || !configMap {
		t.Errorf("the broker's volumes %v: want its state on a claim and its config from a ConfigMap", pod["volumes"])
	}
	env := fmt.Sprint(containers(pod))
	for _, want := range []string{"BROKER_CLUSTER_PASSWORD", "secretRef"} {
		if !strings.Contains(env, want) {
			t.Errorf("the broker's container has no %s", want)
		}
	}

	// What the workloads name exists, with the keys they read.
	secrets := map[string]map[string]any{}
	for _, o := range objs {
		if o.kind() == "Secret" {
			data, _ := get(o.m, "stringData").(map[string]any)
			secrets[o.name()] = data
		}
	}
	for name, pod := range pods(objs) {
		for _, v := range list(pod["volumes"]) {
			if n, ok := get(v, "configMap", "name").(string); ok {
				find(t, objs, "ConfigMap", n)
			}
			if n, ok := get(v, "persistentVolumeClaim", "claimName").(string); ok {
				find(t, objs, "PersistentVolumeClaim", n)
			}
		}
		for _, c := range containers(pod) {
			for _, e := range list(c["env"]) {
				ref := get(e, "valueFrom", "secretKeyRef")
				if ref == nil {
					continue
				}
				s, key := get(ref, "name").(string), get(ref, "key").(string)
				if _, ok := secrets[s][key]; !ok {
					t.Errorf("%s reads key %s of Secret %s, which secrets.example.yaml does not make", name, key, s)
				}
			}
			for _, e := range list(c["envFrom"]) {
				if s, ok := get(e, "secretRef", "name").(string); ok && secrets[s] == nil {
					t.Errorf("%s reads Secret %s, which secrets.example.yaml does not make", name, s)
				}
			}
		}
	}

	// The Service reaches the broker's pod, on ports it has.
	svc := find(t, objs, "Service", "acp-broker")
	labels, _ := get(b.m, "spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range get(svc.m, "spec", "selector").(map[string]any) {
		if labels[k] != v {
			t.Errorf("the Service selects %s=%v, which the broker's pod is not labelled with", k, v)
		}
	}
	var ports []any
	for _, c := range containers(pod) {
		for _, p := range list(c["ports"]) {
			ports = append(ports, p["name"], p["containerPort"])
		}
	}
	for _, p := range list(get(svc.m, "spec", "ports")) {
		if !slices.Contains(ports, p["targetPort"]) {
			t.Errorf("the Service's port %v goes to %v, which the broker's container does not have", p["name"], p["targetPort"])
		}
	}
}

// No container is privileged, escalates or keeps a capability; no pod
// shares the node's namespaces. The broker's pod runs under the runtime's
// default seccomp profile; a host's, which runs bubblewrap, is in a user
// namespace of its own, as an unmasked /proc requires.
func TestManifests_LeastPrivilege(t *testing.T) {
	objs := objects(t)
	all := pods(objs)
	if len(all) < 2 {
		t.Fatalf("%d workloads", len(all))
	}
	for name, pod := range all {
		for _, k := range []string{"hostPID", "hostIPC", "hostNetwork"} {
			if pod[k] == true {
				t.Errorf("%s: %s", name, k)
			}
		}
		if pod["automountServiceAccountToken"] != false {
			t.Errorf("%s mounts a service account token, which nothing in it uses", name)
		}
		if get(pod, "securityContext", "runAsNonRoot") != true {
			t.Errorf("%s may run as root", name)
		}
		for _, c := range containers(pod) {
			sc, _ := c["securityContext"].(map[string]any)
			if sc["privileged"] == true {
				t.Errorf("%s: container %v is privileged", name, c["name"])
			}
			if sc["allowPrivilegeEscalation"] != false {
				t.Errorf("%s: container %v may gain privileges", name, c["name"])
			}
			if drop := fmt.Sprint(get(sc, "capabilities", "drop")); drop != "[ALL]" {
				t.Errorf("%s: container %v drops %s, not every capability", name, c["name"], drop)
			}
			if add := get(sc, "capabilities", "add"); add != nil {
				t.Errorf("%s: container %v adds %v", name, c["name"], add)
			}
			if sc["procMount"] == "Unmasked" && pod["hostUsers"] != false {
				t.Errorf("%s: container %v has /proc unmasked outside a user namespace of its own (the API refuses it)", name, c["name"])
			}
		}
	}
	if p := get(all["acp-broker"], "securityContext", "seccompProfile", "type"); p != "RuntimeDefault" {
		t.Errorf("the broker, which runs no agent with [cluster], has seccomp %v", p)
	}
	host := all["acp-broker-host"]
	if host == nil {
		t.Fatal("no Deployment acp-broker-host")
	}
	if host["hostUsers"] != false {
		t.Error("the hosts' pods share the node's user namespace: their unconfined seccomp and AppArmor would be root's on the node")
	}
}

// Every image is pinned: a tag or a digest, never latest.
func TestManifests_ImagesArePinned(t *testing.T) {
	pinned := func(where, image string) {
		t.Helper()
		name, digest, _ := strings.Cut(image, "@")
		slash := strings.LastIndex(name, "/")
		colon := strings.LastIndex(name, ":")
		tag := ""
		if colon > slash {
			tag = name[colon+1:]
		}
		if digest == "" && (tag == "" || tag == "latest") {
			t.Errorf("%s: image %q is not pinned", where, image)
		}
	}
	n := 0
	objs := objects(t)
	for name, pod := range pods(objs) {
		for _, c := range containers(pod) {
			pinned(name, fmt.Sprint(c["image"]))
			n++
		}
	}
	for _, im := range list(get(find(t, objs, "Kustomization", "acp-broker").m, "images")) {
		pinned("kustomization.yaml", fmt.Sprintf("%v:%v", im["newName"], im["newTag"]))
		n++
	}
	values, err := decodeAll(filepath.Join(kube, helmValues))
	if err != nil {
		t.Fatal(err)
	}
	pinned(helmValues, fmt.Sprintf("%v:%v", get(values[0], "container", "image", "repository"), get(values[0], "container", "image", "tag")))
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(string(b), -1) {
		pinned("Dockerfile", m[1])
		n++
	}
	if n < 4 {
		t.Errorf("%d images", n)
	}
}

// helmInstall is an install of the NATS chart, in the docs.
var helmInstall = regexp.MustCompile(`helm (?:upgrade --)?install [^\n]*nats/nats[^\n]*`)

// NATS comes from its chart at one pinned version, wherever the docs say
// how; it refuses clients without a password, and the users the broker
// and the hosts connect as are its users, at the address its Service has.
func TestManifests_NATSChartIsPinnedWithAuth(t *testing.T) {
	versions := map[string]bool{}
	for _, f := range []string{filepath.Join(kube, helmValues), filepath.Join(kube, "README.md"), "../README.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := helmInstall.FindAllString(string(b), -1)
		if len(lines) == 0 {
			t.Errorf("%s has no helm install of nats/nats", f)
		}
		for _, l := range lines {
			m := regexp.MustCompile(`--version[ =](\d+\.\d+\.\d+)\b`).FindStringSubmatch(l)
			if m == nil {
				t.Errorf("%s: %q pins no version of the chart", f, l)
				continue
			}
			versions[m[1]] = true
			if !strings.Contains(l, "nats-values.yaml") || !strings.Contains(l, "--namespace acp-broker") {
				t.Errorf("%s: %q installs without the values, or elsewhere than acp-broker", f, l)
			}
		}
	}
	if len(versions) != 1 {
		t.Errorf("the docs install the chart at versions %v", versions)
	}

	values, err := decodeAll(filepath.Join(kube, helmValues))
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]bool{}
	env, _ := get(values[0], "container", "env").(map[string]any)
	for _, u := range list(get(values[0], "config", "merge", "authorization", "users")) {
		pw, _ := u["password"].(string)
		v, ok := strings.CutPrefix(pw, "<< $")
		v = strings.TrimSuffix(v, " >>")
		if !ok || env[v] == nil {
			t.Errorf("NATS user %v's password is not a variable from a Secret: %q", u["user"], pw)
		}
		users[fmt.Sprint(u["user"])] = true
	}
	if len(users) < 2 {
		t.Fatalf("NATS has users %v: auth is off, or broker and hosts share one", users)
	}
	for _, c := range configs(t) {
		url := get(c.doc, "cluster", "url")
		if url != "nats://nats.acp-broker.svc.cluster.local:4222" {
			t.Errorf("%s: cluster.url = %v, not the chart's Service (release nats in acp-broker)", c.key, url)
		}
		if u := fmt.Sprint(get(c.doc, "cluster", "user")); !users[u] {
			t.Errorf("%s: cluster.user = %s, not a user of NATS (%v)", c.key, u, users)
		}
	}
}

// configFile is a configuration a ConfigMap holds.
type configFile struct {
	key  string // ConfigMap/key
	text string
	doc  map[string]any
}

// configs are the TOML files the ConfigMaps hold.
func configs(t *testing.T) []configFile {
	t.Helper()
	var out []configFile
	for _, o := range objects(t) {
		if o.kind() != "ConfigMap" {
			continue
		}
		data, _ := get(o.m, "data").(map[string]any)
		for k, v := range data {
			if !strings.HasSuffix(k, ".toml") {
				continue
			}
			c := configFile{key: o.name() + "/" + k, text: v.(string)}
			if err := decodeTOML(c.text, &c.doc); err != nil {
				t.Fatalf("%s: %v", c.key, err)
			}
			out = append(out, c)
		}
	}
	if len(out) != 2 {
		t.Fatalf("%d configurations in ConfigMaps, want the broker's and the host's", len(out))
	}
	return out
}

// The configurations in the ConfigMaps load as the broker loads them,
// with the environment the pods give them: every key exists and every
// value is valid.
func TestManifests_ConfigsLoad(t *testing.T) {
	env := []string{"BROKER_DISCORD_TOKEN=test-token", "BROKER_CLUSTER_PASSWORD=test-password", "ANTHROPIC_API_KEY=test-key"}
	for _, c := range configs(t) {
		path := filepath.Join(t.TempDir(), filepath.Base(c.key))
		if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := config.Load(path, env); err != nil {
			t.Errorf("%s: %v", c.key, err)
		}
	}
}

// readmeSection is the README's section on agent hosts.
func readmeSection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, s, ok := strings.Cut(string(b), "\n## Agents on several machines\n")
	if !ok {
		t.Fatal("README.md has no section Agents on several machines")
	}
	s, _, _ = strings.Cut(s, "\n## ")
	return s
}

// The configurations the README's section shows load as the broker loads
// them: every key they name exists, every value is valid.
func TestReadme_ClusterExamplesLoad(t *testing.T) {
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllStringSubmatch(readmeSection(t), -1)
	if len(blocks) < 3 {
		t.Fatalf("%d TOML examples in the section", len(blocks))
	}
	env := []string{"BROKER_CLUSTER_PASSWORD=test-password", "ANTHROPIC_API_KEY=test-key"}
	for i, b := range blocks {
		// The examples are indented in a list.
		text := regexp.MustCompile(`(?m)^   `).ReplaceAllString(b[1], "")
		path := filepath.Join(t.TempDir(), fmt.Sprintf("example%d.toml", i))
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		environ := env[1:]
		if strings.Contains(text, "[cluster]") {
			environ = env // the password is given as the README says: in the environment
		}
		if _, err := config.Load(path, environ); err != nil {
			t.Errorf("example %d:\n%s\n%v", i+1, text, err)
		}
	}
}

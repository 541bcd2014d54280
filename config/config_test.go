package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// problems returns the rendered problems of a *ValidationError.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want a *ValidationError, got %T: %v", err, err)
	}
	out := make([]string, len(ve.Problems))
	for i, p := range ve.Problems {
		out[i] = p.String()
	}
	return out
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultsValidate(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if c.Gateway.Listen != "127.0.0.1:8443" || c.Gateway.MaxBodyBytes != 4<<20 ||
		c.Gateway.RequestTimeout != 10*time.Minute || c.Tenants.Store != StoreMemory ||
		c.Worker.KV.PageTokens != 16 || c.Observability.Tracing.SampleRatio != 1 {
		t.Errorf("unexpected defaults: %+v", c)
	}
	want := []Model{{Name: "tiny", ContextLength: 8192, ContextPolicy: ContextClamp, Pooling: PoolingLast}}
	if !reflect.DeepEqual(c.Models, want) {
		t.Errorf("models = %+v, want %+v", c.Models, want)
	}
	// Default returns a fresh value each time: callers may mutate it.
	c.Models[0].Name = "changed"
	if Default().Models[0].Name != "tiny" {
		t.Error("Default shares state between calls")
	}
}

// TestDefaultsFileListsEveryField keeps defaults.yaml the complete,
// annotated list of keys.
func TestDefaultsFileListsEveryField(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal(defaultsYAML, &doc); err != nil {
		t.Fatal(err)
	}
	inFile := map[string]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			walk(n.Content[0], path)
		case yaml.MappingNode:
			if len(n.Content) == 0 {
				inFile[path] = true // an empty map, such as headers: {}
			}
			for i := 0; i < len(n.Content); i += 2 {
				walk(n.Content[i+1], join(path, n.Content[i].Value))
			}
		case yaml.SequenceNode:
			if len(n.Content) > 0 && n.Content[0].Kind == yaml.MappingNode {
				walk(n.Content[0], path+"[0]")
				return
			}
			inFile[path] = true
		default:
			inFile[path] = true
		}
	}
	walk(&doc, "")
	var want []string
	forEachField(reflect.ValueOf(Default()).Elem(), nil, func(path []string, _ reflect.StructField, _ reflect.Value) {
		want = append(want, strings.Join(path, "."))
	})
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Model]()) {
		want = append(want, "models[0]."+yamlName(f))
	}
	want = append(want, "observability.tracing.headers")
	for _, p := range want {
		if !inFile[p] {
			t.Errorf("defaults.yaml does not list %s", p)
		}
		delete(inFile, p)
	}
	for p := range inFile {
		t.Errorf("defaults.yaml lists %s, which is not a field", p)
	}
}

func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if want := []string{"gateway.yaml", "up.yaml", "worker-decode.yaml", "worker-prefill.yaml"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("examples = %v, want %v", names, want)
	}
	load := func(name string) *Config {
		t.Helper()
		c, err := load(filepath.Join("examples", name), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return c
	}

	gw := load("gateway.yaml")
	if err := gw.ValidateGateway(); err != nil {
		t.Errorf("gateway.yaml: %v", err)
	}
	if gw.Tenants.Store != StoreRedis || len(gw.Models) != 2 || gw.Models[1].ContextPolicy != ContextRefuse ||
		gw.Gateway.MaxBodyBytes != 8<<20 || gw.Observability.Tracing.Exporter != ExporterOTLP {
		t.Errorf("gateway.yaml loaded wrongly: %+v", gw)
	}
	for _, name := range []string{"worker-prefill.yaml", "worker-decode.yaml"} {
		w := load(name)
		if err := w.ValidateWorker(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if w.Worker.Backend != BackendCUDA || len(w.Worker.Gateways) != 2 {
			t.Errorf("%s loaded wrongly: %+v", name, w.Worker)
		}
	}
	if r := load("worker-prefill.yaml").Worker; r.Role != RolePrefill || r.KV.MemoryBytes != 24<<30 {
		t.Errorf("worker-prefill.yaml: role %q, memory %d", r.Role, r.KV.MemoryBytes)
	}
	if r := load("worker-decode.yaml").Worker; r.Role != RoleDecode || r.Transfer.AdvertiseAddr != "decode-0.internal:9101" {
		t.Errorf("worker-decode.yaml: role %q, transfer %+v", r.Role, r.Transfer)
	}
	up := load("up.yaml")
	if up.Worker.KV.MemoryBytes != 256<<20 || up.Observability.LogFormat != LogText || up.Models[0].MaxOutputTokens != 512 {
		t.Errorf("up.yaml loaded wrongly: %+v", up)
	}
}

func TestLoadEmptyPathGivesDefaults(t *testing.T) {
	c, err := load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Error("load(\"\") differs from Default()")
	}
	if _, err := load(filepath.Join(t.TempDir(), "missing.yaml"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want ErrNotExist", err)
	}
}

func TestMergeOverDefaults(t *testing.T) {
	c, err := LoadBytes([]byte(`
gateway:
  listen: "0.0.0.0:443"
  queue: {max_wait: 5s}
worker:
  gateways: ["a:1", "b:2"]
  kv: ~
models:
  - name: m1
    context_length: 100
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Gateway.Listen != "0.0.0.0:443" || c.Gateway.AdminListen != "127.0.0.1:8444" {
		t.Errorf("listen %q admin %q: only listen should change", c.Gateway.Listen, c.Gateway.AdminListen)
	}
	if c.Gateway.Queue.MaxWait != 5*time.Second || c.Gateway.Queue.MaxWaiting != 256 {
		t.Errorf("queue = %+v: max_waiting must keep its default", c.Gateway.Queue)
	}
	if !reflect.DeepEqual(c.Worker.Gateways, []string{"a:1", "b:2"}) {
		t.Errorf("gateways = %v: lists replace the default", c.Worker.Gateways)
	}
	if c.Worker.KV.PageTokens != 16 {
		t.Errorf("kv: null must keep the defaults, got %+v", c.Worker.KV)
	}
	want := []Model{{Name: "m1", ContextLength: 100, ContextPolicy: ContextClamp}}
	if !reflect.DeepEqual(c.Models, want) {
		t.Errorf("models = %+v, want %+v", c.Models, want)
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	c, err := LoadBytes([]byte(`
models:
  - &base {name: a, context_length: 4096, max_output_tokens: 100}
  - <<: *base
    name: b
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Model{
		{Name: "a", ContextLength: 4096, ContextPolicy: ContextClamp, MaxOutputTokens: 100},
		{Name: "b", ContextLength: 4096, ContextPolicy: ContextClamp, MaxOutputTokens: 100},
	}
	if !reflect.DeepEqual(c.Models, want) {
		t.Errorf("models = %+v, want %+v", c.Models, want)
	}
	// A merged mapping is checked like any other.
	_, err = LoadBytes([]byte("models:\n  - &x {name: a, contxt: 1}\n  - <<: *x\n"))
	if got := problems(t, err); len(got) != 2 || !strings.Contains(got[0], `models[0].contxt (line 2): unknown key`) {
		t.Errorf("got %q", got)
	}
}

func TestStructuralErrors(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown top-level key", "gatway:\n  listen: x\n",
			[]string{`gatway (line 1): unknown key; did you mean "gateway"?`}},
		{"unknown nested key", "gateway:\n  listn: \":1\"\n",
			[]string{`gateway.listn (line 2): unknown key; did you mean "listen"?`}},
		{"unknown key in list element", "models:\n  - name: a\n    context_lenght: 5\n",
			[]string{`models[0].context_lenght (line 3): unknown key; did you mean "context_length"?`}},
		{"unknown key without a close match", "worker:\n  flux_capacitor: 1\n",
			[]string{`worker.flux_capacitor (line 2): unknown key`}},
		{"duplicate key", "gateway:\n  listen: a\n  listen: b\n",
			[]string{`gateway.listen (line 3): duplicate key (first set on line 2)`}},
		{"duration as number", "gateway:\n  request_timeout: 10\n",
			[]string{`gateway.request_timeout (line 2): expected a duration such as "30s" or "10m" (got "10")`}},
		{"bad duration", "gateway:\n  request_timeout: 10 minutes\n",
			[]string{`gateway.request_timeout (line 2): expected a duration such as "30s" or "10m" (got "10 minutes")`}},
		{"bad byte size", "gateway:\n  max_body_bytes: 4mb\n",
			[]string{`gateway.max_body_bytes (line 2): invalid byte size "4mb": unknown unit "mb" (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)`}},
		{"float into int", "worker:\n  max_batch: 1.5\n",
			[]string{`worker.max_batch (line 2): expected an integer (got "1.5")`}},
		{"int overflow", "worker:\n  max_batch: 99999999999999999999\n",
			[]string{`worker.max_batch (line 2): expected an integer (got "99999999999999999999")`}},
		{"yes is not a boolean", "gateway:\n  tls: {plaintext: yes}\n",
			[]string{`gateway.tls.plaintext (line 2): expected true or false (got "yes")`}},
		{"string into float", "worker:\n  kv: {memory_fraction: half}\n",
			[]string{`worker.kv.memory_fraction (line 2): expected a number (got "half")`}},
		{"list where mapping expected", "worker:\n  kv: [1, 2]\n",
			[]string{`worker.kv (line 2): expected a mapping of keys, got a list`}},
		{"mapping where scalar expected", "gateway:\n  listen: {host: a}\n",
			[]string{`gateway.listen (line 2): expected a string, got a mapping`}},
		{"scalar where list expected", "worker:\n  gateways: a:1\n",
			[]string{`worker.gateways (line 2): expected a list, got the value "a:1"`}},
		{"top level not a mapping", "- a\n- b\n",
			[]string{`(top level) (line 1): expected a mapping of keys, got a list`}},
		{"every problem at once", "gateway:\n  listn: a\n  max_wait: 1s\nworker:\n  max_batch: x\n",
			[]string{
				`gateway.listn (line 2): unknown key; did you mean "listen"?`,
				`gateway.max_wait (line 3): unknown key`,
				`worker.max_batch (line 5): expected an integer (got "x")`,
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadBytes([]byte(tc.yaml))
			if got := problems(t, err); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestSyntaxErrors(t *testing.T) {
	for name, in := range map[string]string{
		"two documents": "gateway: {}\n---\nworker: {}\n",
		"bad indent":    "gateway:\n  listen: a\n bad: b\n",
		"unclosed":      "gateway: {listen: a\n",
	} {
		if _, err := LoadBytes([]byte(in)); err == nil || !strings.HasPrefix(err.Error(), "invalid YAML") {
			t.Errorf("%s: got %v, want an invalid YAML error", name, err)
		}
	}
}

func TestAliasBombIsRejected(t *testing.T) {
	// One wide mapping expanded a thousand times: a million key checks
	// unless the checker's node budget stops it.
	var b strings.Builder
	b.WriteString("x: &m {")
	for i := range 1000 {
		fmt.Fprintf(&b, "k%d: 1, ", i)
	}
	b.WriteString("name: a}\nmodels: [*m")
	for range 999 {
		b.WriteString(", *m")
	}
	b.WriteString("]\n")
	_, err := LoadBytes([]byte(b.String()))
	got := problems(t, err)
	if len(got) != maxProblems+1 || got[maxProblems] != "(document): more than 50 problems; stopped" {
		t.Errorf("got %d problems, last %q", len(got), got[len(got)-1])
	}

	// Valid keys, nested merges: each level merges the previous one ten
	// times, so only the node budget stops the walk.
	b.Reset()
	b.WriteString("models:\n  - &m0 {name: a, context_length: 2}\n")
	for lvl := 1; lvl <= 6; lvl++ {
		fmt.Fprintf(&b, "  - &m%d {<<: [*m%d", lvl, lvl-1)
		for range 9 {
			fmt.Fprintf(&b, ", *m%d", lvl-1)
		}
		b.WriteString("]}\n")
	}
	_, err = LoadBytes([]byte(b.String()))
	if got := problems(t, err); len(got) != 1 || !strings.Contains(got[0], "document too large or too many alias expansions") {
		t.Errorf("got %q", got)
	}
}

func TestEnvOverride(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "c.yaml", "gateway:\n  listen: \"127.0.0.1:1000\"\n")
	c, err := load(path, []string{
		"HOME=/root",
		"WARDEN_CONFIG=/elsewhere.yaml", // not a section: left to the CLI
		"WARDEN_GATEWAY_LISTEN=0.0.0.0:2000",
		"WARDEN_TENANTS_REDIS_ADDR=redis:6380",
		"WARDEN_GATEWAY_MAX_BODY_BYTES=1GiB",
		"WARDEN_GATEWAY_REQUEST_TIMEOUT=90s",
		"WARDEN_GATEWAY_TLS_PLAINTEXT=true",
		"WARDEN_OBSERVABILITY_TRACING_SAMPLE_RATIO=0.25",
		"WARDEN_WORKER_GATEWAYS= g1:1, g2:2 ,",
		"WARDEN_WORKER_ROLE=decode",
		"WARDEN_TENANTS_REDIS_KEY_PREFIX=",
		"WARDEN_WORKER_ID=null",
		"WARDEN_WORKER_KV_PAGE_TOKENS=32",
	})
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string][2]any{
		"env beats file":  {c.Gateway.Listen, "0.0.0.0:2000"},
		"nested":          {c.Tenants.Redis.Addr, "redis:6380"},
		"byte size":       {c.Gateway.MaxBodyBytes, ByteSize(1 << 30)},
		"duration":        {c.Gateway.RequestTimeout, 90 * time.Second},
		"bool":            {c.Gateway.TLS.Plaintext, true},
		"float":           {c.Observability.Tracing.SampleRatio, 0.25},
		"list":            {c.Worker.Gateways, []string{"g1:1", "g2:2"}},
		"enum":            {c.Worker.Role, RoleDecode},
		"empty string":    {c.Tenants.Redis.KeyPrefix, ""},
		"verbatim string": {c.Worker.ID, "null"},
		"int":             {c.Worker.KV.PageTokens, 32},
	}
	for name, kv := range checks {
		if !reflect.DeepEqual(kv[0], kv[1]) {
			t.Errorf("%s: got %#v, want %#v", name, kv[0], kv[1])
		}
	}

	_, err = load(path, []string{
		"WARDEN_GATEWAY_LISTN=x",
		"WARDEN_MODELS_0_NAME=x",
		"WARDEN_WORKER_MAX_BATCH=lots",
		"WARDEN_GATEWAY_REQUEST_TIMEOUT=5",
	})
	want := []string{
		`WARDEN_GATEWAY_LISTN: unknown configuration variable; did you mean "WARDEN_GATEWAY_LISTEN"?`,
		`WARDEN_MODELS_0_NAME: unknown configuration variable`,
		`WARDEN_WORKER_MAX_BATCH: expected an integer (got "lots")`,
		`WARDEN_GATEWAY_REQUEST_TIMEOUT: expected a duration such as "30s" or "10m" (got "5")`,
	}
	if got := problems(t, err); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}

	// An override that breaks a rule fails validation by field path.
	_, err = load(path, []string{"WARDEN_WORKER_MAX_BATCH=0"})
	if got := problems(t, err); !reflect.DeepEqual(got, []string{"worker.max_batch: must be > 0 (got 0)"}) {
		t.Errorf("got %q", got)
	}
}

func TestLoadReadsProcessEnvironment(t *testing.T) {
	t.Setenv("WARDEN_GATEWAY_ADMIN_LISTEN", "127.0.0.1:7777")
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Gateway.AdminListen != "127.0.0.1:7777" {
		t.Errorf("admin_listen = %q", c.Gateway.AdminListen)
	}
}

func TestEnvNamesAreUniqueAndDocumented(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	forEachField(reflect.ValueOf(Default()).Elem(), nil, func([]string, reflect.StructField, reflect.Value) { n++ })
	fields := Default().envFields()
	if len(fields) != n {
		t.Errorf("%d fields map to %d variable names: two paths collide", n, len(fields))
	}
	for name := range fields {
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("README.md does not document %s", name)
		}
	}
	if got := EnvName("tenants", "redis", "addr"); got != "WARDEN_TENANTS_REDIS_ADDR" {
		t.Errorf("EnvName = %q", got)
	}
}

func TestRelativePathsFollowTheFile(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "c.yaml", "gateway:\n  tls: {cert_file: certs/a.pem, key_file: /abs/a-key.pem}\n")
	c, err := load(path, []string{"WARDEN_CLUSTER_CA_FILE=rel/ca.pem", "WARDEN_CLUSTER_CERT_FILE=c", "WARDEN_CLUSTER_KEY_FILE=k"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "certs/a.pem"); c.Gateway.TLS.CertFile != want {
		t.Errorf("cert_file = %q, want %q", c.Gateway.TLS.CertFile, want)
	}
	if c.Gateway.TLS.KeyFile != "/abs/a-key.pem" {
		t.Errorf("absolute path changed: %q", c.Gateway.TLS.KeyFile)
	}
	if c.Cluster.CAFile != "rel/ca.pem" {
		t.Errorf("environment paths are relative to the working directory, got %q", c.Cluster.CAFile)
	}
	if c.Gateway.Listen != "127.0.0.1:8443" {
		t.Errorf("non-path field changed: %q", c.Gateway.Listen)
	}
}

func TestRender(t *testing.T) {
	c := Default()
	c.Gateway.Listen = ":9443"
	c.Gateway.MaxBodyBytes = 3 * 1000 * 1000
	c.Gateway.RequestTimeout = 90 * time.Second
	c.Models = append(c.Models, Model{Name: "big", ContextLength: 1 << 20, ContextPolicy: ContextRefuse, MaxOutputTokens: 7})
	c.Worker.Gateways = []string{"x:1", "y:2"}
	c.Observability.Tracing.SampleRatio = 0.5
	out, err := c.Render()
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadBytes(out)
	if err != nil {
		t.Fatalf("rendered config does not load: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip changed the config:\n%s", out)
	}
	if !strings.Contains(string(out), "max_body_bytes: 3MB\n") {
		t.Errorf("byte sizes should render with units:\n%s", out)
	}

	c.Gateway.AdminToken = "hunter2-admin"
	c.Observability.Tracing.Headers = map[string]string{"authorization": "Bearer s3cret"}
	out, err = c.Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"hunter2-admin", "s3cret"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("Render leaks %q", secret)
		}
	}
	if !strings.Contains(string(out), "admin_token: REDACTED") || !strings.Contains(string(out), "authorization: REDACTED") {
		t.Errorf("secrets should show as REDACTED:\n%s", out)
	}
	if c.Gateway.AdminToken != "hunter2-admin" || c.Observability.Tracing.Headers["authorization"] != "Bearer s3cret" {
		t.Error("Render modified the config")
	}
}

func TestResolvedID(t *testing.T) {
	w := Default().Worker
	w.Role = RoleDecode
	if got := w.ResolvedID("host1"); got != "host1-decode-9001" {
		t.Errorf("ResolvedID = %q", got)
	}
	w.ID = "w7"
	if got := w.ResolvedID("host1"); got != "w7" {
		t.Errorf("ResolvedID = %q", got)
	}
}

func TestByteSize(t *testing.T) {
	good := map[string]ByteSize{
		"0": 0, "1048576": 1 << 20, "512MiB": 512 << 20, "2GB": 2e9, "1.5GiB": 3 << 29,
		"1 KiB": 1024, " 7B ": 7, "1.0001KB": 1000, "8TiB": 8 << 40,
	}
	for in, want := range good {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1e3", "0x10", "5 mb", "MiB", "1..2KiB", "9999999999TiB", "1/2"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", in)
		}
	}
	render := map[ByteSize]string{0: "0", 1000: "1KB", 1024: "1KiB", 4 << 20: "4MiB", 2e9: "2GB", 1500: "1500", 3 << 29: "1536MiB"}
	for in, want := range render {
		if got := in.String(); got != want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(in), got, want)
		}
	}
}

func FuzzLoadBytes(f *testing.F) {
	f.Add(defaultsYAML)
	files, _ := filepath.Glob("examples/*.yaml")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		"", "~", "[]", "gateway: [", "models: [{name: a, context_length: -1}]",
		"a: &a [*a]", "worker: {gateways: *x}", "<<: {gateway: {}}", "gateway: {max_body_bytes: 1.5GiB}",
		"observability: {tracing: {sample_ratio: .nan, headers: {a: b}}}", "? [a]\n: b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := LoadBytes(data)
		if err != nil {
			return
		}
		_ = c.Validate()
		out, err := c.Render()
		if err != nil {
			t.Fatalf("Render: %v", err)
		}
		if _, err := LoadBytes(out); err != nil {
			t.Fatalf("rendered config does not load: %v\n%s", err, out)
		}
	})
}

func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"0", "512MiB", "2GB", "1.5GiB", "7 B", "9223372036854775807", "8EiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseByteSize(s)
		if err != nil {
			return
		}
		if v < 0 {
			t.Fatalf("ParseByteSize(%q) = %d < 0", s, v)
		}
		back, err := ParseByteSize(v.String())
		if err != nil || back != v {
			t.Fatalf("String() of %d = %q does not parse back (%d, %v)", v, v.String(), back, err)
		}
	})
}

// TestModelAliasesAndReasoningParser: models[].aliases and
// models[].reasoning_parser are read and checked.
func TestModelAliasesAndReasoningParser(t *testing.T) {
	c, err := LoadBytes([]byte("models:\n  - {name: a, context_length: 64, aliases: [default, x], reasoning_parser: qwen3}\n  - {name: b, context_length: 64, aliases: [y]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Aliases(); !reflect.DeepEqual(got, map[string]string{"default": "a", "x": "a", "y": "b"}) {
		t.Errorf("Aliases() = %v", got)
	}
	c, err = LoadBytes([]byte("models:\n  - {name: a, context_length: 64, aliases: [b, x, 'no way'], reasoning_parser: qwen}\n  - {name: b, context_length: 64, aliases: [x]}\n"))
	if err == nil {
		err = c.ValidateGateway()
	}
	want := []string{
		`models[0].reasoning_parser: must be qwen3, deepseek_r1, none or auto (got "qwen")`,
		`models[0].aliases[0]: "b" is the name of models[1]`,
		`models[0].aliases[2]: must be 1-128 characters of letters, digits and . _ - : /, starting with a letter or digit (got "no way")`,
		`models[1].aliases[0]: duplicate of models[0].aliases[1] ("x")`,
	}
	var got []string
	for _, p := range problems(t, err) {
		if strings.HasPrefix(p, "models") {
			got = append(got, p)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// TestModelPooling: models[].pooling is last (also when omitted) or mean;
// anything else names the field.
func TestModelPooling(t *testing.T) {
	c, err := LoadBytes([]byte("models:\n  - {name: a, context_length: 64, pooling: mean}\n  - {name: b, context_length: 64}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Models[0].Pooling != PoolingMean || c.Models[1].Pooling != "" {
		t.Fatalf("pooling = %q, %q; want mean, \"\"", c.Models[0].Pooling, c.Models[1].Pooling)
	}
	c, err = LoadBytes([]byte("models:\n  - {name: a, context_length: 64, pooling: cls}\n"))
	if err == nil {
		err = c.ValidateGateway()
	}
	got := problems(t, err)
	if !slices.Contains(got, `models[0].pooling: must be one of last, mean (got "cls")`) {
		t.Fatalf("problems %q lack the pooling one", got)
	}
}

// Package helm_test checks the Helm chart in deploy/helm/warden with
// Helm's Go SDK (helm.sh/helm/v4, pinned in go.mod), in this process: no
// helm binary, no cluster, no network. It lints the chart as `helm lint
// --strict` does and renders it as `helm template` does for every values
// file in warden/ci, decodes every rendered object strictly into its
// Kubernetes API type (k8s.io/api, and the Prometheus Operator's types for
// ServiceMonitor and PrometheusRule), so a misspelt or misplaced field
// fails, checks the rendered warden configs with warden's own config
// validation and the objects' cross-references (xref_test.go), and runs
// what it renders as local processes (run_test.go).
package helm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	"helm.sh/helm/v4/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/warden-ai/warden/config"
)

const (
	chart     = "warden"
	release   = "rel"
	namespace = "warden"
)

// kubeVersion is the Kubernetes version the chart is rendered and linted
// for: the one of the k8s.io/api types the objects decode into.
var kubeVersion = mustKubeVersion("v1.36.0")

func mustKubeVersion(v string) *common.KubeVersion {
	kv, err := common.ParseKubeVersion(v)
	if err != nil {
		panic(err)
	}
	return kv
}

// readValues reads a values file as helm's -f does.
func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	vals, err := common.ReadValuesFile(file)
	if err != nil {
		t.Fatalf("values %s: %v", file, err)
	}
	return vals
}

// renderFiles renders the chart with a values file and --set values
// (renderChartIn), failing the test on an error.
func renderFiles(t *testing.T, file string, cluster engine.ClientProvider, set ...string) (map[string]string, map[string]any) {
	t.Helper()
	files, vals, err := renderChartIn(file, cluster, set...)
	if err != nil {
		t.Fatal(err)
	}
	return files, vals
}

// renderChart renders the chart as `helm template rel warden -n warden
// -f file --set s…` does (no file when file is ""), in this process: the
// release's values (chart defaults coalesced with the file and the --set
// values, checked against the chart's values.schema.json), then every
// template. Nothing reaches a cluster: lookup finds nothing, as under
// `helm template` or Argo CD. It returns the rendered manifests by
// template path (NOTES.txt among them) and the release's values.
func renderChart(file string, set ...string) (map[string]string, map[string]any, error) {
	return renderChartIn(file, nil, set...)
}

// renderChartIn is renderChart with lookup answered by cluster (as in
// `helm upgrade`, which looks up in the cluster); nil: lookup finds
// nothing.
func renderChartIn(file string, cluster engine.ClientProvider, set ...string) (map[string]string, map[string]any, error) {
	ch, err := loader.Load(chart)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the chart: %w", err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kubeVersion
	if ch.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, kubeVersion.String()) {
		return nil, nil, fmt.Errorf("chart requires kubeVersion %s, rendering for %s", ch.Metadata.KubeVersion, kubeVersion)
	}
	user := map[string]any{}
	if file != "" {
		if user, err = common.ReadValuesFile(file); err != nil {
			return nil, nil, fmt.Errorf("values %s: %w", file, err)
		}
	}
	for _, s := range set {
		if err := strvals.ParseInto(s, user); err != nil {
			return nil, nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	vals, err := util.ToRenderValuesWithSchemaValidation(ch, user,
		common.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, caps, false)
	if err != nil {
		return nil, nil, fmt.Errorf("values %s %v: %w", file, set, err)
	}
	var files map[string]string
	if cluster != nil {
		files, err = engine.RenderWithClientProvider(ch, vals, cluster)
	} else {
		files, err = engine.Render(ch, vals)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("rendering with %s %v: %w", file, set, err)
	}
	out := make(map[string]string)
	for name, data := range files {
		// Partials are not manifests (helm template prints none).
		if strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		out[name] = data
	}
	values, err := vals.Table("Values")
	if err != nil {
		return nil, nil, err
	}
	return out, values.AsMap(), nil
}

// valueFiles lists the chart's ci/ values files (at least the four the
// docs name) and its production example, values-production.yaml.
func valueFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chart, "ci", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"default-values.yaml", "gpu-values.yaml", "external-redis-values.yaml", "production-values.yaml"} {
		if !slices.Contains(files, filepath.Join(chart, "ci", want)) {
			t.Fatalf("%s/ci lacks %s (has %v)", chart, want, files)
		}
	}
	return append(files, filepath.Join(chart, "values-production.yaml"))
}

// TestLint is `helm lint --strict` with each values file: no warning
// and no error from the SDK's lint rules (chart file, values and schema,
// templates rendered in lint mode, dependencies, CRDs).
func TestLint(t *testing.T) {
	for _, f := range valueFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			res := lint.RunAll(chart, readValues(t, f), namespace, lint.WithKubeVersion(kubeVersion))
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev { // --strict: warnings fail too
					t.Errorf("lint: %v", m)
				}
			}
		})
	}
}

// object is one rendered manifest: its kind and name and the typed value
// it decoded into.
type object struct {
	kind, name string
	value      any
	// raw is the object as JSON values, for kinds the tests read without
	// a Go type of their own (cert-manager's Certificate).
	raw map[string]any
}

// newObject returns a pointer to the Go type of apiVersion and kind.
func newObject(apiVersion, kind string) (any, bool) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return new(corev1.ConfigMap), true
	case "v1 Secret":
		return new(corev1.Secret), true
	case "v1 Service":
		return new(corev1.Service), true
	case "apps/v1 Deployment":
		return new(appsv1.Deployment), true
	case "apps/v1 StatefulSet":
		return new(appsv1.StatefulSet), true
	case "policy/v1 PodDisruptionBudget":
		return new(policyv1.PodDisruptionBudget), true
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return new(autoscalingv2.HorizontalPodAutoscaler), true
	case "networking.k8s.io/v1 NetworkPolicy":
		return new(networkingv1.NetworkPolicy), true
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return new(monitoringv1.ServiceMonitor), true
	case "monitoring.coreos.com/v1 PrometheusRule":
		return new(monitoringv1.PrometheusRule), true
	case "cert-manager.io/v1 Certificate":
		return new(certificate), true
	case "cert-manager.io/v1 Issuer":
		return new(issuer), true
	}
	return nil, false
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// render renders the chart with a values file and decodes every object
// strictly: an unknown field anywhere fails the test.
func render(t *testing.T, values string) map[string]object {
	t.Helper()
	objs, _, _ := renderValues(t, values)
	return objs
}

// renderValues is render returning the release's values and the rendered
// NOTES.txt (what the chart tells whoever installs it) too.
func renderValues(t *testing.T, values string) (map[string]object, map[string]any, string) {
	t.Helper()
	return renderIn(t, values, nil)
}

// renderIn is renderValues with lookup answered by cluster (nil:
// nothing found) and --set values.
func renderIn(t *testing.T, values string, cluster engine.ClientProvider, set ...string) (map[string]object, map[string]any, string) {
	t.Helper()
	files, vals := renderFiles(t, values, cluster, set...)
	names := slices.Sorted(maps.Keys(files))
	var docs []string
	var notes string
	for _, name := range names {
		if path.Base(name) == "NOTES.txt" {
			notes = files[name]
			continue
		}
		docs = append(docs, docSep.Split(files[name], -1)...)
	}
	objs := make(map[string]object)
	for _, doc := range docs {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if string(j) == "null" {
			continue // comments only
		}
		if err := json.Unmarshal(j, &head); err != nil {
			t.Fatalf("rendered object: %v\n%s", err, doc)
		}
		v, ok := newObject(head.APIVersion, head.Kind)
		if !ok {
			t.Fatalf("rendered %s %s %q: no API type known to this test", head.APIVersion, head.Kind, head.Metadata.Name)
		}
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%s %q does not decode strictly: %v\n%s", head.Kind, head.Metadata.Name, err, doc)
		}
		id := head.Kind + "/" + head.Metadata.Name
		if _, dup := objs[id]; dup {
			t.Fatalf("%s rendered twice", id)
		}
		var raw map[string]any
		if err := json.Unmarshal(j, &raw); err != nil {
			t.Fatal(err)
		}
		objs[id] = object{kind: head.Kind, name: head.Metadata.Name, value: v, raw: raw}
	}
	return objs, vals, notes
}

func TestTemplate(t *testing.T) {
	for _, f := range valueFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			objs := render(t, f)
			cm := get[corev1.ConfigMap](t, objs, "ConfigMap/rel-warden-config")
			gw := get[appsv1.StatefulSet](t, objs, "StatefulSet/rel-warden-gateway")
			checkGateway(t, gw, cm)
			for _, role := range []string{"prefill", "decode"} {
				d := get[appsv1.Deployment](t, objs, "Deployment/rel-warden-"+role)
				checkWorker(t, d, cm, role)
				if strings.Contains(f, "gpu") {
					checkGPU(t, d)
				}
			}
			for _, o := range objs {
				switch v := o.value.(type) {
				case *appsv1.Deployment:
					checkPod(t, v.Name, v.Spec.Template)
				case *appsv1.StatefulSet:
					checkPod(t, v.Name, v.Spec.Template)
				}
			}
			for _, c := range []string{"gateway", "prefill", "decode"} {
				get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/rel-warden-"+c)
				get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy/rel-warden-"+c)
			}
			checkCertificates(t, objs)
			if strings.Contains(f, "gpu") {
				get[autoscalingv2.HorizontalPodAutoscaler](t, objs, "HorizontalPodAutoscaler/rel-warden-gateway")
				get[monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor/rel-warden")
				rules := get[monitoringv1.PrometheusRule](t, objs, "PrometheusRule/rel-warden")
				if len(rules.Spec.Groups) == 0 || len(rules.Spec.Groups[0].Rules) == 0 {
					t.Errorf("PrometheusRule has no rules: %+v", rules.Spec)
				}
				dash := get[corev1.ConfigMap](t, objs, "ConfigMap/rel-warden-dashboard")
				want, err := os.ReadFile(filepath.Join("..", "grafana", "warden.json"))
				if err != nil {
					t.Fatal(err)
				}
				if dash.Labels["grafana_dashboard"] != "1" || strings.TrimSpace(dash.Data["warden.json"]) != strings.TrimSpace(string(want)) {
					t.Errorf("dashboard ConfigMap: labels %v, warden.json not deploy/grafana/warden.json", dash.Labels)
				}
			}
		})
	}
}

// get returns the object id of type T, failing the test if it is missing.
func get[T any](t *testing.T, objs map[string]object, id string) *T {
	t.Helper()
	o, ok := objs[id]
	if !ok {
		t.Fatalf("%s not rendered; rendered: %v", id, sortedIDs(objs))
	}
	v, ok := o.value.(*T)
	if !ok {
		t.Fatalf("%s is a %T", id, o.value)
	}
	return v
}

// loadConfig loads a config file of the ConfigMap as the process would:
// the file, then the container's environment over it.
func loadConfig(t *testing.T, cm *corev1.ConfigMap, key string, env []corev1.EnvVar) *config.Config {
	t.Helper()
	data, ok := cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap lacks %s", key)
	}
	cfg, err := config.LoadBytes([]byte(data))
	if err != nil {
		t.Fatalf("%s: %v\n%s", key, err, data)
	}
	var environ []string
	for _, e := range env {
		if !strings.HasPrefix(e.Name, "WARDEN_") {
			continue
		}
		// The pod IP the kubelet substitutes for $(POD_IP).
		environ = append(environ, e.Name+"="+strings.ReplaceAll(e.Value, "$(POD_IP)", "10.1.2.3"))
	}
	if err := cfg.ApplyEnv(environ); err != nil {
		t.Fatalf("%s with the container's environment: %v", key, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%s: %v\n%s", key, err, data)
	}
	return cfg
}

// checkGateway checks the gateway's config, that it has probes, and its
// drain timing.
func checkGateway(t *testing.T, gw *appsv1.StatefulSet, cm *corev1.ConfigMap) {
	t.Helper()
	pod := gw.Spec.Template.Spec
	c := pod.Containers[0]
	cfg := loadConfig(t, cm, "gateway.yaml", c.Env)
	if err := cfg.ValidateGateway(); err != nil {
		t.Fatalf("gateway.yaml: %v", err)
	}
	checkProbes(t, c, cfg)
	// Kubernetes kills the pod terminationGracePeriodSeconds after the
	// preStop hook starts: the hook's wait plus the drain must fit.
	var preStop int64
	if h := c.Lifecycle; h != nil && h.PreStop != nil && h.PreStop.Sleep != nil {
		preStop = h.PreStop.Sleep.Seconds
	}
	if preStop <= 0 {
		t.Errorf("gateway has no preStop sleep: %+v", c.Lifecycle)
	}
	grace := pod.TerminationGracePeriodSeconds
	drain := int64(cfg.Gateway.DrainTimeout.Seconds())
	delay := int64(cfg.Gateway.ShutdownDelay.Seconds())
	if drain <= 0 || grace == nil || *grace <= preStop+delay+drain {
		t.Errorf("terminationGracePeriodSeconds %v, want more than preStop %ds + shutdown_delay %ds + drain_timeout %ds",
			grace, preStop, delay, drain)
	}
	checkMounts(t, pod, cfg)
}

// checkProbes checks a warden container's probes: startup and liveness
// GET /livez on the metrics port (served from process start, whatever the
// readiness), readiness GET /readyz, and that each probe's port is a
// port of the container.
func checkProbes(t *testing.T, c corev1.Container, cfg *config.Config) {
	t.Helper()
	for _, p := range []struct {
		name string
		pr   *corev1.Probe
	}{{"startup", c.StartupProbe}, {"liveness", c.LivenessProbe}} {
		if p.pr == nil || p.pr.HTTPGet == nil || p.pr.HTTPGet.Path != "/livez" || p.pr.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s %s probe %+v, want GET /livez on the metrics port", c.Name, p.name, p.pr)
		}
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == "metrics" && strings.HasSuffix(cfg.Observability.Metrics.Listen, fmt.Sprintf(":%d", p.ContainerPort))
	}) {
		t.Errorf("%s: no metrics port for observability.metrics.listen %q", c.Name, cfg.Observability.Metrics.Listen)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("%s readiness probe %+v, want GET /readyz", c.Name, c.ReadinessProbe)
	}
	for _, pr := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			continue
		}
		port := pr.HTTPGet.Port
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
			return p.Name == port.String() || p.ContainerPort == port.IntVal
		}) {
			t.Errorf("%s: probe port %s is no port of the container", c.Name, port.String())
		}
	}
}

// checkPod checks what every pod of the chart must have: non-root,
// RuntimeDefault seccomp, per container a read-only root filesystem, no
// capabilities, no privilege escalation, CPU and memory requests and a
// memory limit; writable paths are emptyDir volumes; pods of a role
// spread over nodes.
func checkPod(t *testing.T, name string, tpl corev1.PodTemplateSpec) {
	t.Helper()
	pod := tpl.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext %+v, want runAsNonRoot and seccomp RuntimeDefault", name, psc)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s/%s: securityContext %+v, want a read-only root, no escalation, capabilities drop ALL", name, c.Name, sc)
		}
		r := c.Resources
		if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
			t.Errorf("%s/%s: resources %+v, want CPU and memory requests and a memory limit", name, c.Name, r)
		}
		for _, m := range c.VolumeMounts {
			if m.ReadOnly {
				continue
			}
			if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name && v.EmptyDir != nil }) {
				t.Errorf("%s/%s: writable mount %s is not an emptyDir", name, c.Name, m.MountPath)
			}
		}
	}
	if len(pod.TopologySpreadConstraints) == 0 && pod.Affinity == nil {
		t.Errorf("%s: no topologySpreadConstraints or affinity", name)
	}
	for _, ts := range pod.TopologySpreadConstraints {
		if ts.LabelSelector == nil || !matches(ts.LabelSelector.MatchLabels, tpl.Labels) {
			t.Errorf("%s: topology spread selector %v does not select the pod's labels %v", name, ts.LabelSelector, tpl.Labels)
		}
	}
}

// checkCertificates checks cert-manager's objects when rendered: each
// cluster certificate carries its identity's URI SAN and both key usages,
// writes the Secret the pods mount, and names an issuer the chart renders
// or the one in the values.
func checkCertificates(t *testing.T, objs map[string]object) {
	t.Helper()
	for _, peer := range []string{"gateway", "worker"} {
		o, ok := objs["Certificate/rel-warden-cluster-"+peer]
		if !ok {
			continue
		}
		c := o.value.(*certificate)
		if !slices.Equal(c.Spec.URIs, []string{"spiffe://warden/" + peer}) || !slices.Contains(c.Spec.Usages, "client auth") ||
			!slices.Contains(c.Spec.Usages, "server auth") {
			t.Errorf("Certificate %s: uris %v usages %v", c.Metadata.Name, c.Spec.URIs, c.Spec.Usages)
		}
		if c.Spec.IssuerRef.Kind == "Issuer" {
			if _, ok := objs["Issuer/"+c.Spec.IssuerRef.Name]; !ok {
				t.Errorf("Certificate %s names Issuer %s, not rendered", c.Metadata.Name, c.Spec.IssuerRef.Name)
			}
		}
	}
}

// checkWorker checks a worker's config: its role, the gateways it
// registers with (every gateway replica) and its advertised addresses.
func checkWorker(t *testing.T, d *appsv1.Deployment, cm *corev1.ConfigMap, role string) {
	t.Helper()
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	key := "worker-" + role + ".yaml"
	cfg := loadConfig(t, cm, key, c.Env)
	if err := cfg.ValidateWorker(); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	checkProbes(t, c, cfg)
	grace, drain := pod.TerminationGracePeriodSeconds, int64(cfg.Worker.DrainTimeout.Seconds())
	if grace == nil || *grace <= drain {
		t.Errorf("%s: terminationGracePeriodSeconds %v, want more than worker.drain_timeout %ds", key, grace, drain)
	}
	if string(cfg.Worker.Role) != role || cfg.Worker.AdvertiseAddr != "10.1.2.3:9001" ||
		cfg.Worker.Transfer.AdvertiseAddr != "10.1.2.3:9101" {
		t.Errorf("%s: role %s, advertise %q, transfer advertise %q", key, cfg.Worker.Role, cfg.Worker.AdvertiseAddr,
			cfg.Worker.Transfer.AdvertiseAddr)
	}
	for i, g := range cfg.Worker.Gateways {
		if want := fmt.Sprintf("rel-warden-gateway-%d.rel-warden-gateway-headless:8445", i); g != want {
			t.Errorf("%s: gateways[%d] = %q, want %q", key, i, g, want)
		}
	}
	checkMounts(t, pod, cfg)
}

// checkGPU checks a GPU worker's resources and placement.
func checkGPU(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	gpu := pod.Containers[0].Resources.Limits[corev1.ResourceName("nvidia.com/gpu")]
	if gpu.Value() != 1 || len(pod.NodeSelector) == 0 || len(pod.Tolerations) == 0 {
		t.Errorf("%s: nvidia.com/gpu %v, nodeSelector %v, tolerations %v", d.Name, gpu.String(), pod.NodeSelector, pod.Tolerations)
	}
}

// checkMounts checks that every file the config names lies under a
// mounted volume, and that every mount names a volume of the pod.
func checkMounts(t *testing.T, pod corev1.PodSpec, cfg *config.Config) {
	t.Helper()
	mounts := pod.Containers[0].VolumeMounts
	for _, m := range mounts {
		if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
			t.Errorf("mount %s names no volume", m.Name)
		}
	}
	files := []string{cfg.Cluster.CAFile, cfg.Cluster.CertFile, cfg.Cluster.KeyFile}
	if cfg.Worker.ModelDir != "" && pod.Containers[0].Name == "worker" {
		files = append(files, cfg.Worker.ModelDir)
	}
	if pod.Containers[0].Name == "gateway" {
		files = append(files, cfg.Gateway.AdminTokenFile, cfg.Tenants.KeySecretFile, cfg.Tenants.Redis.PasswordFile,
			cfg.Gateway.TLS.CertFile, cfg.Gateway.TLS.KeyFile)
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		if !slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool { return strings.HasPrefix(f, m.MountPath+"/") }) {
			t.Errorf("%s is under no volume mount of %s", f, pod.Containers[0].Name)
		}
	}
}

// checkServicePorts checks that a Service's selector matches a rendered
// pod template and its named target ports are ports of that pod.
func checkServicePorts(t *testing.T, s *corev1.Service, objs map[string]object) {
	t.Helper()
	var pods []corev1.PodTemplateSpec
	for _, o := range objs {
		switch v := o.value.(type) {
		case *appsv1.Deployment:
			pods = append(pods, v.Spec.Template)
		case *appsv1.StatefulSet:
			pods = append(pods, v.Spec.Template)
		}
	}
	for _, p := range s.Spec.Ports {
		found := false
		for _, pod := range pods {
			if !matches(s.Spec.Selector, pod.Labels) {
				continue
			}
			for _, c := range pod.Spec.Containers {
				found = found || slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
					return cp.Name == p.TargetPort.String() || cp.ContainerPort == p.TargetPort.IntVal
				})
			}
		}
		if !found {
			t.Errorf("Service %s port %s: no selected pod has target port %s", s.Name, p.Name, p.TargetPort.String())
		}
	}
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// TestMisspeltFieldFails shows the strict decoding bites: a misspelt
// field in an otherwise valid object is an error.
func TestMisspeltFieldFails(t *testing.T) {
	j, err := yaml.YAMLToJSON([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selektor: {a: b}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(new(corev1.Service)); err == nil || !strings.Contains(err.Error(), "selektor") {
		t.Fatalf("decoding a misspelt field: %v, want an unknown field error", err)
	}
}

// TestRenderSet checks renderChart's --set values and errors as `helm
// template --set` gives them: a value set over the file's, and a
// template's `required` failing the render with its message.
func TestRenderSet(t *testing.T) {
	defaults := filepath.Join(chart, "ci", "default-values.yaml")
	files, vals, err := renderChart(defaults, "gateway.replicas=3")
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := vals["gateway"].(map[string]any); fmt.Sprint(g["replicas"]) != "3" {
		t.Errorf("gateway.replicas = %v after --set gateway.replicas=3", g["replicas"])
	}
	if !strings.Contains(strings.Join(slices.Collect(maps.Values(files)), "\n"), "replicas: 3") {
		t.Error("no object rendered with replicas: 3")
	}
	_, _, err = renderChart(defaults, "redis.enabled=false")
	if err == nil || !strings.Contains(err.Error(), "redis.external.addr is required") {
		t.Errorf("rendering with redis.enabled=false and no redis.external.addr: %v, want the required value's message", err)
	}
}

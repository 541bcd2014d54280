package helm_test

import (
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/warden-ai/warden/config"
)

// externalSecretValues are the values that name a Secret the operator
// creates before installing (cert-manager, a secrets manager): a pod may
// mount a Secret the chart does not render only when a value or the
// chart's NOTES.txt names it.
var externalSecretValues = []string{
	"secrets.existingSecret",
	"gateway.tls.secretName",
	"clusterTLS.gatewaySecretName",
	"clusterTLS.workerSecretName",
	"redis.external.passwordSecret",
}

// externalSecrets returns the Secret names the values name (by Secret
// name: the value's path), and those the rendered NOTES.txt names of the
// ones the chart's pods use (by name: "NOTES.txt"), which the chart tells
// whoever installs it to create.
func externalSecrets(vals map[string]any, notes string, objs map[string]object) map[string]string {
	out := map[string]string{}
	words := strings.FieldsFunc(notes, func(r rune) bool { return !strings.ContainsRune(hostChars, r) })
	for _, w := range workloads(objs) {
		for _, v := range w.template.Spec.Volumes {
			if v.Secret == nil {
				continue
			}
			if _, rendered := objs["Secret/"+v.Secret.SecretName]; !rendered && slices.Contains(words, v.Secret.SecretName) {
				out[v.Secret.SecretName] = "NOTES.txt"
			}
		}
	}
	for _, p := range externalSecretValues {
		v := any(vals)
		for _, k := range strings.Split(p, ".") {
			m, ok := v.(map[string]any)
			if !ok {
				v = nil
				break
			}
			v = m[k]
		}
		if s, ok := v.(string); ok && s != "" {
			out[s] = p
		}
	}
	return out
}

// certificateSecrets returns the Secrets that rendered cert-manager
// Certificates make (by Secret name: the Certificate's URI SANs).
func certificateSecrets(objs map[string]object) map[string][]string {
	out := map[string][]string{}
	for _, o := range objs {
		api, _ := o.raw["apiVersion"].(string)
		if o.kind != "Certificate" || !strings.HasPrefix(api, "cert-manager.io/") {
			continue
		}
		spec, _ := o.raw["spec"].(map[string]any)
		name, _ := spec["secretName"].(string)
		var uris []string
		list, _ := spec["uris"].([]any)
		for _, u := range list {
			uris = append(uris, fmt.Sprint(u))
		}
		out[name] = uris
	}
	return out
}

// workload is a rendered controller of pods.
type workload struct {
	kind, name string
	replicas   int
	// serviceName is a StatefulSet's governing (headless) Service.
	serviceName string
	template    corev1.PodTemplateSpec
}

// workloads returns the rendered Deployments and StatefulSets, sorted by
// name, with the replicas they start with (an HPA's minReplicas when the
// controller leaves replicas to it).
func workloads(objs map[string]object) []workload {
	hpaMin := map[string]int{}
	for _, o := range objs {
		if h, ok := o.value.(*autoscalingv2.HorizontalPodAutoscaler); ok {
			n := 1
			if h.Spec.MinReplicas != nil {
				n = int(*h.Spec.MinReplicas)
			}
			hpaMin[h.Spec.ScaleTargetRef.Kind+"/"+h.Spec.ScaleTargetRef.Name] = n
		}
	}
	replicas := func(kind, name string, r *int32) int {
		if r != nil {
			return int(*r)
		}
		if n, ok := hpaMin[kind+"/"+name]; ok {
			return n
		}
		return 1
	}
	var out []workload
	for _, o := range objs {
		switch v := o.value.(type) {
		case *appsv1.Deployment:
			out = append(out, workload{kind: "Deployment", name: v.Name, replicas: replicas("Deployment", v.Name, v.Spec.Replicas), template: v.Spec.Template})
		case *appsv1.StatefulSet:
			out = append(out, workload{kind: "StatefulSet", name: v.Name, replicas: replicas("StatefulSet", v.Name, v.Spec.Replicas),
				serviceName: v.Spec.ServiceName, template: v.Spec.Template})
		}
	}
	slices.SortFunc(out, func(a, b workload) int { return strings.Compare(a.name, b.name) })
	return out
}

// TestCrossReferences checks, for every values file, that the rendered
// objects refer to one another correctly: every ConfigMap and Secret a pod
// mounts or reads in its environment is rendered (or is an external Secret
// a value names) and has the keys used, every Service and
// PodDisruptionBudget selects pods of the render and every Service port
// targets a declared container port, every probe's port is a declared
// container port, every ServiceMonitor selects a Service with its port,
// and the NetworkPolicies let the real traffic through and nothing else.
func TestCrossReferences(t *testing.T) {
	for _, f := range valueFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			objs, vals, notes := renderValues(t, f)
			ext := externalSecrets(vals, notes, objs)
			for _, w := range workloads(objs) {
				checkPodRefs(t, w, objs, ext)
				checkProbePorts(t, w)
			}
			for _, o := range objs {
				switch v := o.value.(type) {
				case *corev1.Service:
					checkServicePorts(t, v, objs)
				case *policyv1.PodDisruptionBudget:
					if !selectsPods(t, objs, v.Spec.Selector) {
						t.Errorf("PodDisruptionBudget %s selects no rendered pod", v.Name)
					}
				case *monitoringv1.ServiceMonitor:
					checkServiceMonitor(t, v, objs)
				}
			}
			checkNetworkPolicies(t, objs)
		})
	}
}

// checkPodRefs checks a pod template's ConfigMaps and Secrets.
func checkPodRefs(t *testing.T, w workload, objs map[string]object, ext map[string]string) {
	t.Helper()
	spec := w.template.Spec
	certs := certificateSecrets(objs)
	need := func(kind, name string, keys []string, optional *bool) {
		if optional != nil && *optional {
			return
		}
		o, ok := objs[kind+"/"+name]
		if !ok {
			if _, byCertManager := certs[name]; kind == "Secret" && (ext[name] != "" || byCertManager) {
				return // the operator's, named by a value, or cert-manager's
			}
			t.Errorf("%s %s uses %s %q, which is neither rendered, nor made by a rendered Certificate, nor named by one of the values %v",
				w.kind, w.name, kind, name, externalSecretValues)
			return
		}
		var have []string
		switch v := o.value.(type) {
		case *corev1.ConfigMap:
			have = append(slices.Collect(maps.Keys(v.Data)), slices.Collect(maps.Keys(v.BinaryData))...)
		case *corev1.Secret:
			have = append(slices.Collect(maps.Keys(v.Data)), slices.Collect(maps.Keys(v.StringData))...)
		}
		for _, k := range keys {
			if !slices.Contains(have, k) {
				t.Errorf("%s %s uses key %q of %s %s, which has %v", w.kind, w.name, k, kind, name, have)
			}
		}
	}
	itemKeys := func(items []corev1.KeyToPath) []string {
		var ks []string
		for _, it := range items {
			ks = append(ks, it.Key)
		}
		return ks
	}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			need("ConfigMap", v.ConfigMap.Name, itemKeys(v.ConfigMap.Items), v.ConfigMap.Optional)
		case v.Secret != nil:
			need("Secret", v.Secret.SecretName, itemKeys(v.Secret.Items), v.Secret.Optional)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					need("ConfigMap", s.ConfigMap.Name, itemKeys(s.ConfigMap.Items), s.ConfigMap.Optional)
				}
				if s.Secret != nil {
					need("Secret", s.Secret.Name, itemKeys(s.Secret.Items), s.Secret.Optional)
				}
			}
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				need("Secret", r.Name, []string{r.Key}, r.Optional)
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				need("ConfigMap", r.Name, []string{r.Key}, r.Optional)
			}
		}
		for _, e := range c.EnvFrom {
			if r := e.SecretRef; r != nil {
				need("Secret", r.Name, nil, r.Optional)
			}
			if r := e.ConfigMapRef; r != nil {
				need("ConfigMap", r.Name, nil, r.Optional)
			}
		}
		for _, m := range c.VolumeMounts {
			if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
				t.Errorf("%s %s container %s mounts %s, no volume of the pod", w.kind, w.name, c.Name, m.Name)
			}
		}
	}
	for _, s := range spec.ImagePullSecrets {
		need("Secret", s.Name, nil, nil)
	}
}

// probePort returns the port a probe uses (nil for exec probes).
func probePort(p *corev1.Probe) *intstr.IntOrString {
	switch {
	case p == nil:
		return nil
	case p.HTTPGet != nil:
		return &p.HTTPGet.Port
	case p.TCPSocket != nil:
		return &p.TCPSocket.Port
	case p.GRPC != nil:
		return &intstr.IntOrString{Type: intstr.Int, IntVal: p.GRPC.Port}
	}
	return nil
}

// containerPort resolves a port (number or name) against a container's
// declared ports.
func containerPort(c corev1.Container, port intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// checkProbePorts checks that every probe uses a declared container port.
func checkProbePorts(t *testing.T, w workload) {
	t.Helper()
	for _, c := range w.template.Spec.Containers {
		for name, p := range map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
			if port := probePort(p); port != nil {
				if _, ok := containerPort(c, *port); !ok {
					t.Errorf("%s %s container %s: %s port %s is not a declared container port", w.kind, w.name, c.Name, name, port)
				}
			}
		}
	}
}

// selectsPods reports whether a label selector matches a rendered pod
// template.
func selectsPods(t *testing.T, objs map[string]object, sel *metav1.LabelSelector) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("selector %v: %v", sel, err)
		return false
	}
	if s.Empty() {
		return false
	}
	for _, w := range workloads(objs) {
		if s.Matches(labels.Set(w.template.Labels)) {
			return true
		}
	}
	return false
}

// checkServiceMonitor checks that a ServiceMonitor selects a rendered
// Service with each endpoint's port.
func checkServiceMonitor(t *testing.T, sm *monitoringv1.ServiceMonitor, objs map[string]object) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatalf("ServiceMonitor %s: %v", sm.Name, err)
	}
	for _, ep := range sm.Spec.Endpoints {
		found := false
		for _, o := range objs {
			if svc, ok := o.value.(*corev1.Service); ok && s.Matches(labels.Set(svc.Labels)) {
				found = found || slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
			}
		}
		if !found {
			t.Errorf("ServiceMonitor %s: no rendered Service with its labels has port %q", sm.Name, ep.Port)
		}
	}
}

// netPeer is a source or destination of traffic for the NetworkPolicy
// check: a pod of the release (by its template), or one outside it.
type netPeer struct {
	name      string
	namespace string
	nsLabels  map[string]string
	labels    map[string]string
	// w is the release's pod template; nil outside the release.
	w *workload
}

// The peers outside the release: an application calling the API from
// another namespace, and Prometheus in the monitoring namespace.
var (
	clientPeer = netPeer{name: "client (another namespace)", namespace: "apps",
		nsLabels: map[string]string{"kubernetes.io/metadata.name": "apps"}, labels: map[string]string{"app": "client"}}
	monitoringPeer = netPeer{name: "prometheus (namespace monitoring)", namespace: "monitoring",
		nsLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"},
		labels:   map[string]string{"app.kubernetes.io/name": "prometheus"}}
)

// edge is one flow of the release's real traffic: from a peer to a
// container port of a pod template.
type edge struct {
	from string // peer name
	to   string // workload name
	port int32
}

// realTraffic is what the release's processes really connect to, from
// their rendered configs: gateways to Redis (tenants.redis.addr), workers
// to every gateway's registry (worker.gateways), gateways to workers'
// control ports and prefill workers to the decode workers' transfer ports
// (the addresses workers advertise), clients to the gateways' API port,
// Prometheus to every metrics listener.
func realTraffic(t *testing.T, objs map[string]object) (map[edge]bool, map[string]netPeer) {
	t.Helper()
	ws := workloads(objs)
	peers := map[string]netPeer{clientPeer.name: clientPeer, monitoringPeer.name: monitoringPeer}
	for i := range ws {
		w := &ws[i]
		peers[w.name] = netPeer{name: w.name, namespace: namespace, nsLabels: map[string]string{"kubernetes.io/metadata.name": namespace},
			labels: w.template.Labels, w: w}
	}
	cfgs := map[string]*config.Config{}
	gateways := map[string]bool{}
	for _, w := range ws {
		if cfg := wardenConfig(t, w, objs); cfg != nil {
			cfgs[w.name] = cfg
			gateways[w.name] = w.template.Spec.Containers[0].Args[0] == "gateway"
		}
	}
	edges := map[edge]bool{}
	// to adds an edge to the pods behind a host:port a process dials.
	to := func(from string, hostport string) {
		host, port, err := net.SplitHostPort(hostport)
		if err != nil {
			t.Errorf("%s dials %q: %v", from, hostport, err)
			return
		}
		n, _ := strconv.Atoi(port)
		targets := resolveService(objs, ws, host, int32(n))
		if len(targets) == 0 && strings.Contains(host, namespace) {
			t.Errorf("%s dials %s: no rendered Service or pod has that name and port", from, hostport)
		}
		for _, tg := range targets {
			edges[edge{from: from, to: tg.w, port: tg.port}] = true
		}
	}
	listenPort := func(addr string) int32 {
		_, p, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		return int32(n)
	}
	for name, cfg := range cfgs {
		if p := listenPort(cfg.Observability.Metrics.Listen); p > 0 {
			edges[edge{from: monitoringPeer.name, to: name, port: p}] = true
		}
		switch {
		case gateways[name]:
			// The admin listener is the operator's (a port-forward, or
			// whom the chart's values let in): no flow of the release.
			edges[edge{from: clientPeer.name, to: name, port: listenPort(cfg.Gateway.Listen)}] = true
			if cfg.Tenants.Store == config.StoreRedis {
				to(name, cfg.Tenants.Redis.Addr)
			}
		default:
			for _, g := range cfg.Worker.Gateways {
				to(name, g)
			}
			for other := range cfgs {
				if !gateways[other] {
					continue
				}
				// The gateways dial the worker's control port.
				edges[edge{from: other, to: name, port: listenPort(cfg.Worker.Listen)}] = true
			}
			if cfg.Worker.Role == config.RoleDecode {
				for other, oc := range cfgs {
					if !gateways[other] && oc.Worker.Role == config.RolePrefill && oc.Worker.Model == cfg.Worker.Model {
						// Prefill sends the KV to the decode worker.
						edges[edge{from: other, to: name, port: listenPort(cfg.Worker.Transfer.Listen)}] = true
					}
				}
			}
		}
	}
	return edges, peers
}

// wardenConfig loads the warden config a pod template runs with (nil for
// a pod that runs something else).
func wardenConfig(t *testing.T, w workload, objs map[string]object) *config.Config {
	t.Helper()
	c := w.template.Spec.Containers[0]
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		return nil
	}
	file := c.Args[i+1]
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, m.MountPath+"/")
		if !ok {
			continue
		}
		for _, v := range w.template.Spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			key := rel
			for _, it := range v.ConfigMap.Items {
				if it.Path == rel {
					key = it.Key
				}
			}
			cm := get[corev1.ConfigMap](t, objs, "ConfigMap/"+v.ConfigMap.Name)
			return loadConfig(t, cm, key, c.Env)
		}
	}
	t.Errorf("%s %s: --config %s is in no ConfigMap volume", w.kind, w.name, file)
	return nil
}

// podPort is a container port of a pod template behind a name.
type podPort struct {
	w    string
	port int32
}

// resolveService returns the pod templates and container ports behind
// host:port, where host is a Service name (in any of its DNS forms) or a
// StatefulSet pod's name under its headless Service.
func resolveService(objs map[string]object, ws []workload, host string, port int32) []podPort {
	base := host
	for _, suffix := range []string{"." + namespace + ".svc.cluster.local", "." + namespace + ".svc", "." + namespace} {
		base = strings.TrimSuffix(base, suffix)
	}
	podName, svcName, isPod := strings.Cut(base, ".")
	if !isPod {
		svcName = base
	}
	o, ok := objs["Service/"+svcName]
	if !ok {
		return nil
	}
	svc := o.value.(*corev1.Service)
	var out []podPort
	for _, sp := range svc.Spec.Ports {
		if sp.Port != port {
			continue
		}
		for _, w := range ws {
			if !matches(svc.Spec.Selector, w.template.Labels) {
				continue
			}
			if isPod && (w.serviceName != svcName || !strings.HasPrefix(podName, w.name+"-")) {
				continue
			}
			tp := sp.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(sp.Port)
			}
			for _, c := range w.template.Spec.Containers {
				if cp, ok := containerPort(c, tp); ok {
					out = append(out, podPort{w: w.name, port: cp})
				}
			}
		}
	}
	return out
}

// checkNetworkPolicies checks the rendered NetworkPolicies against the
// release's real traffic (realTraffic): every flow of it is allowed, and
// on a pod the policies isolate, a port that is not open to clients is
// reachable from nobody else, inside the release or outside.
func checkNetworkPolicies(t *testing.T, objs map[string]object) {
	t.Helper()
	var nps []*networkingv1.NetworkPolicy
	for _, o := range objs {
		if np, ok := o.value.(*networkingv1.NetworkPolicy); ok {
			nps = append(nps, np)
		}
	}
	edges, peers := realTraffic(t, objs)
	for e := range edges {
		if !allowed(t, nps, peers[e.from], peers[e.to], e.port) {
			t.Errorf("NetworkPolicy: %s cannot reach %s port %d, which it uses", e.from, e.to, e.port)
		}
	}
	for _, dst := range peers {
		if dst.w == nil || !isolated(t, nps, dst, networkingv1.PolicyTypeIngress) {
			continue
		}
		for _, c := range dst.w.template.Spec.Containers {
			for _, cp := range c.Ports {
				if edges[edge{from: clientPeer.name, to: dst.name, port: cp.ContainerPort}] {
					continue // open to every client, wherever it runs
				}
				for _, src := range peers {
					if src.name == dst.name {
						continue // a pod reaches itself over loopback
					}
					if allowed(t, nps, src, dst, cp.ContainerPort) && !edges[edge{from: src.name, to: dst.name, port: cp.ContainerPort}] {
						t.Errorf("NetworkPolicy: %s can reach %s port %d (%s), which it never uses", src.name, dst.name, cp.ContainerPort, cp.Name)
					}
				}
			}
		}
	}
}

// isolated reports whether a policy of type ty selects the pod.
func isolated(t *testing.T, nps []*networkingv1.NetworkPolicy, p netPeer, ty networkingv1.PolicyType) bool {
	for _, np := range nps {
		if np.Namespace != "" && np.Namespace != p.namespace || p.namespace != namespace {
			continue
		}
		if selectorMatches(t, &np.Spec.PodSelector, p.labels) && slices.Contains(policyTypes(np), ty) {
			return true
		}
	}
	return false
}

// policyTypes is a policy's types as the API server defaults them.
func policyTypes(np *networkingv1.NetworkPolicy) []networkingv1.PolicyType {
	if len(np.Spec.PolicyTypes) > 0 {
		return np.Spec.PolicyTypes
	}
	types := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(np.Spec.Egress) > 0 {
		types = append(types, networkingv1.PolicyTypeEgress)
	}
	return types
}

func selectorMatches(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("selector %v: %v", sel, err)
		return false
	}
	return s.Matches(labels.Set(l))
}

// allowed reports whether the policies let src open a TCP connection to
// dst's container port: dst's ingress and src's egress (for pods of the
// namespace the policies are in) both allow it.
func allowed(t *testing.T, nps []*networkingv1.NetworkPolicy, src, dst netPeer, port int32) bool {
	in, out := !isolated(t, nps, dst, networkingv1.PolicyTypeIngress), !isolated(t, nps, src, networkingv1.PolicyTypeEgress)
	for _, np := range nps {
		if !in && selectorMatches(t, &np.Spec.PodSelector, dst.labels) && slices.Contains(policyTypes(np), networkingv1.PolicyTypeIngress) {
			for _, r := range np.Spec.Ingress {
				if peersMatch(t, r.From, src) && portsMatch(r.Ports, dst, port) {
					in = true
				}
			}
		}
		if !out && src.namespace == namespace && selectorMatches(t, &np.Spec.PodSelector, src.labels) &&
			slices.Contains(policyTypes(np), networkingv1.PolicyTypeEgress) {
			for _, r := range np.Spec.Egress {
				if peersMatch(t, r.To, dst) && portsMatch(r.Ports, dst, port) {
					out = true
				}
			}
		}
	}
	return in && out
}

// peersMatch reports whether a rule's peers include p (no peers: all).
func peersMatch(t *testing.T, peers []networkingv1.NetworkPolicyPeer, p netPeer) bool {
	if len(peers) == 0 {
		return true
	}
	for _, np := range peers {
		switch {
		case np.IPBlock != nil:
			// Pod traffic is matched by selectors; ipBlocks are for
			// addresses outside the cluster.
		case np.NamespaceSelector == nil:
			if p.namespace == namespace && selectorMatches(t, np.PodSelector, p.labels) {
				return true
			}
		default:
			if selectorMatches(t, np.NamespaceSelector, p.nsLabels) &&
				(np.PodSelector == nil || selectorMatches(t, np.PodSelector, p.labels)) {
				return true
			}
		}
	}
	return false
}

// portsMatch reports whether a rule's ports include dst's container port
// (no ports: all).
func portsMatch(ports []networkingv1.NetworkPolicyPort, dst netPeer, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if p.Port == nil {
			return true
		}
		if p.Port.Type == intstr.Int {
			end := p.Port.IntVal
			if p.EndPort != nil {
				end = *p.EndPort
			}
			if port >= p.Port.IntVal && port <= end {
				return true
			}
			continue
		}
		if dst.w != nil {
			for _, c := range dst.w.template.Spec.Containers {
				if n, ok := containerPort(c, *p.Port); ok && n == port {
					return true
				}
			}
		}
	}
	return false
}

// TestSecretsStable renders the chart twice with each values file: the
// Secrets must be the same, or a GitOps tool (helm template, where lookup
// finds nothing) replaces the admin token and the API keys' HMAC secret
// on every sync and every stored key stops verifying. The certificates
// the chart generates without cert-manager (kubernetes.io/tls Secrets)
// are the documented exception: the second render finds them by lookup,
// as `helm upgrade` does (README.md, Certificates: GitOps takes
// cert-manager or Secrets of its own).
func TestSecretsStable(t *testing.T) {
	for _, f := range valueFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			a, _, _ := renderValues(t, f)
			b, _, _ := renderIn(t, f, clusterOf(a, func(_ string, s *corev1.Secret) bool { return s.Type == corev1.SecretTypeTLS }))
			for id, o := range a {
				s, ok := o.value.(*corev1.Secret)
				if !ok {
					continue
				}
				s2 := get[corev1.Secret](t, b, id)
				if !reflect.DeepEqual(s.Data, s2.Data) || !reflect.DeepEqual(s.StringData, s2.StringData) {
					t.Errorf("CHART FIX NEEDED (secrets): %s differs between two renders of the same values: "+
						"every `helm template` (Argo CD, Flux) would rotate it; take it from an existing Secret or derive it stably", id)
				}
			}
		})
	}
}

// TestStartupProbes checks that every warden container with a liveness
// probe has a startup probe, so that a slow start (loading weights,
// reaching the tenant store) is not killed by the liveness probe's
// budget.
func TestStartupProbes(t *testing.T) {
	for _, f := range valueFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			objs, _, _ := renderValues(t, f)
			for _, w := range workloads(objs) {
				if wardenConfig(t, w, objs) == nil {
					continue // not warden's (Redis starts in a moment)
				}
				for _, c := range w.template.Spec.Containers {
					if c.LivenessProbe != nil && c.StartupProbe == nil {
						t.Errorf("CHART FIX NEEDED (probes): %s %s container %s has a livenessProbe and no startupProbe", w.kind, w.name, c.Name)
					}
				}
			}
		})
	}
}

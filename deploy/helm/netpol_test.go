package helm_test

import (
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// peer is a pod that may open a connection: its labels and its
// namespace's labels.
type peer struct {
	name           string
	labels, nsTags map[string]string
}

// admitted reports whether the rendered policies let from open a
// connection to port (a container port of target, in namespace warden),
// as Kubernetes evaluates ingress policies: a pod no policy selects
// admits everything; a selected pod admits what any rule of any policy
// selecting it admits.
func admitted(pols []*networkingv1.NetworkPolicy, target corev1.PodTemplateSpec, port corev1.ContainerPort, from peer) bool {
	selected := false
	for _, p := range pols {
		if !matchAll(p.Spec.PodSelector.MatchLabels, target.Labels) || len(p.Spec.PodSelector.MatchExpressions) > 0 {
			continue
		}
		selected = true
		for _, r := range p.Spec.Ingress {
			if len(r.Ports) > 0 && !slices.ContainsFunc(r.Ports, func(pp networkingv1.NetworkPolicyPort) bool {
				return pp.Port != nil && (pp.Port.String() == port.Name || pp.Port.IntVal == port.ContainerPort)
			}) {
				continue
			}
			if len(r.From) == 0 {
				return true
			}
			for _, f := range r.From {
				nsOK := f.NamespaceSelector == nil && from.nsTags["kubernetes.io/metadata.name"] == "warden" ||
					f.NamespaceSelector != nil && matchAll(f.NamespaceSelector.MatchLabels, from.nsTags)
				podOK := f.PodSelector == nil || matchAll(f.PodSelector.MatchLabels, from.labels)
				if f.IPBlock == nil && nsOK && podOK {
					return true
				}
			}
		}
	}
	return !selected
}

// matchAll reports whether labels has every key and value of sel (an
// empty sel matches everything).
func matchAll(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestNetworkPolicies: with the default values, each port of each pod
// admits exactly the peers the chart promises: clients reach the
// gateways' API; only workers reach the registry; nobody reaches the
// admin API (port-forward goes through the node); only gateways reach the
// workers' control ports and the in-chart Redis; only prefill workers
// reach the decode workers' transfer port; only the monitoring namespace
// reaches the metrics ports.
func TestNetworkPolicies(t *testing.T) {
	objs := render(t, filepath.Join(chart, "ci", "default-values.yaml"))
	var pols []*networkingv1.NetworkPolicy
	pods := map[string]corev1.PodTemplateSpec{}
	for _, o := range objs {
		switch v := o.value.(type) {
		case *networkingv1.NetworkPolicy:
			pols = append(pols, v)
		case *appsv1.Deployment:
			pods[v.Spec.Template.Labels["app.kubernetes.io/component"]] = v.Spec.Template
		case *appsv1.StatefulSet:
			pods[v.Spec.Template.Labels["app.kubernetes.io/component"]] = v.Spec.Template
		}
	}
	warden := map[string]string{"kubernetes.io/metadata.name": "warden"}
	peers := []peer{
		{"client", map[string]string{"app": "client"}, map[string]string{"kubernetes.io/metadata.name": "apps"}},
		{"monitoring", map[string]string{"app": "prometheus"}, map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
		{"other-pod-here", map[string]string{"app": "other"}, warden},
	}
	for _, c := range []string{"gateway", "prefill", "decode", "redis"} {
		tpl, ok := pods[c]
		if !ok {
			t.Fatalf("no %s pod rendered", c)
		}
		peers = append(peers, peer{c, tpl.Labels, warden})
	}
	// want[target/port] lists the peers admitted; every other is refused.
	want := map[string][]string{
		"gateway/api":      {"client", "monitoring", "other-pod-here", "gateway", "prefill", "decode", "redis"},
		"gateway/admin":    nil,
		"gateway/registry": {"prefill", "decode"},
		"gateway/metrics":  {"monitoring"},
		"prefill/control":  {"gateway"},
		"prefill/metrics":  {"monitoring"},
		"decode/control":   {"gateway"},
		"decode/transfer":  {"prefill"},
		"decode/metrics":   {"monitoring"},
		"redis/redis":      {"gateway"},
	}
	seen := 0
	for target, tpl := range pods {
		for _, port := range tpl.Spec.Containers[0].Ports {
			key := target + "/" + port.Name
			allowed, ok := want[key]
			if !ok {
				t.Errorf("%s: a port this test does not know", key)
				continue
			}
			seen++
			for _, p := range peers {
				if got := admitted(pols, tpl, port, p); got != slices.Contains(allowed, p.name) {
					t.Errorf("%s from %s: admitted %v, want %v", key, p.name, got, !got)
				}
			}
		}
	}
	if seen != len(want) {
		t.Errorf("checked %d ports, want %d", seen, len(want))
	}
}

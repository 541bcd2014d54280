package helm_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/warden-ai/warden/internal/obs/obstest"
)

// target is one scrape target the chart's ServiceMonitor gives the
// Prometheus Operator: the labels its series carry.
type target struct {
	labels map[string]string
}

// series is the target's up series in promtool's notation.
func (tg target) series() string {
	keys := make([]string, 0, len(tg.labels))
	for k := range tg.labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, tg.labels[k])
	}
	return "up{" + strings.Join(parts, ",") + "}"
}

// targets derives the scrape targets of a ServiceMonitor from the
// rendered Services and pods, as the Prometheus Operator labels them
// (its documented ServiceMonitor relabelling): job is the Service's
// jobLabel label, else the Service's name; instance the pod IP and port;
// namespace, service, pod, container and endpoint (the port's name).
func targets(t *testing.T, objs map[string]object, sm *monitoringv1.ServiceMonitor) []target {
	t.Helper()
	var out []target
	ip := 0
	for _, o := range objs {
		svc, ok := o.value.(*corev1.Service)
		if !ok || !matches(sm.Spec.Selector.MatchLabels, svc.Labels) {
			continue
		}
		job := svc.Name
		if v, ok := svc.Labels[sm.Spec.JobLabel]; sm.Spec.JobLabel != "" && ok {
			job = v
		}
		for _, ep := range sm.Spec.Endpoints {
			i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
			if i < 0 {
				continue
			}
			for _, w := range objs {
				var name string
				var tpl corev1.PodTemplateSpec
				switch v := w.value.(type) {
				case *appsv1.Deployment:
					name, tpl = v.Name+"-0", v.Spec.Template
				case *appsv1.StatefulSet:
					name, tpl = v.Name+"-0", v.Spec.Template
				default:
					continue
				}
				if !matches(svc.Spec.Selector, tpl.Labels) {
					continue
				}
				ip++
				out = append(out, target{labels: map[string]string{
					"job":       job,
					"instance":  fmt.Sprintf("10.0.0.%d:%d", ip, svc.Spec.Ports[i].Port),
					"namespace": "warden",
					"service":   svc.Name,
					"pod":       name,
					"container": tpl.Spec.Containers[0].Name,
					"endpoint":  ep.Port,
				}})
			}
		}
	}
	slices.SortFunc(out, func(a, b target) int { return strings.Compare(a.series(), b.series()) })
	return out
}

// TestAlertsMatchChartTargets: the alert rules the chart ships (its
// PrometheusRule) fire on the targets its ServiceMonitor makes. The
// targets' labels come from the rendered objects; promtool evaluates the
// rendered rules with them: every target down raises WardenTargetDown
// with that target's labels, and the jobs are the ones the example
// scrape configuration (deploy/prometheus/prometheus.yml) names.
func TestAlertsMatchChartTargets(t *testing.T) {
	objs := render(t, filepath.Join(chart, "ci", "gpu-values.yaml"))
	sm := get[monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor/rel-warden")
	rule := get[monitoringv1.PrometheusRule](t, objs, "PrometheusRule/rel-warden")
	tgs := targets(t, objs, sm)
	jobs := map[string]int{}
	for _, tg := range tgs {
		jobs[tg.labels["job"]]++
	}
	// Three gateway ordinals are one template here: one gateway target,
	// one per worker role.
	if jobs["warden-gateway"] != 1 || jobs["warden-worker"] != 2 || len(jobs) != 2 {
		t.Fatalf("ServiceMonitor targets by job %v, want warden-gateway 1 and warden-worker 2 (one per role)", jobs)
	}
	example, err := os.ReadFile(filepath.Join("..", "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for job := range jobs {
		if !strings.Contains(string(example), "job_name: "+job+"\n") {
			t.Errorf("job %s is not a job of deploy/prometheus/prometheus.yml", job)
		}
	}

	dir := t.TempDir()
	rules, err := yaml.Marshal(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	// Every target is down from the start: after the rule's 2m "for",
	// one alert per target, with the target's labels.
	var b strings.Builder
	b.WriteString("rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n")
	for _, tg := range tgs {
		fmt.Fprintf(&b, "      - series: %q\n        values: '0x5'\n", tg.series())
	}
	b.WriteString("    alert_rule_test:\n      - eval_time: 1m\n        alertname: WardenTargetDown\n        exp_alerts: []\n")
	b.WriteString("      - eval_time: 3m\n        alertname: WardenTargetDown\n        exp_alerts:\n")
	for _, tg := range tgs {
		b.WriteString("          - exp_labels:\n              severity: page\n")
		for k, v := range tg.labels {
			fmt.Fprintf(&b, "              %s: %q\n", k, v)
		}
		fmt.Fprintf(&b, "            exp_annotations:\n              summary: %q\n              description: %q\n",
			tg.labels["job"]+" target "+tg.labels["instance"]+" is down", "Prometheus cannot scrape "+tg.labels["instance"]+".")
	}
	if err := os.WriteFile(filepath.Join(dir, "test.yml"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(obstest.Promtool(t), "test", "rules", "test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s\nfixture:\n%s", err, out, b.String())
	}
}

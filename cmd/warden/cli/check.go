package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
)

// checkReport is `warden check --json`'s output.
type checkReport struct {
	URL        string                  `json:"url"`
	Models     []adminclient.ModelView `json:"models"`
	Violations []string                `json:"violations"`
	Warnings   []string                `json:"warnings"`
}

// runCheck audits the running gateway's context agreement (invariant I2):
// exit 0 when every model's configured context fits every serving worker's
// KV pool, 1 when some model's configured context exceeds its effective
// context, 2 when the gateway cannot be asked.
func runCheck(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "check", "check [--config FILE] [--url URL] [--token-file FILE] [--cacert FILE] [--json]")
	configPath := fs.String("config", "", "warden config file: the admin URL, token and CA come from it unless given as flags")
	conn := newAdminConn()
	conn.register(fs, "from the config's gateway.admin_listen")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return exitError{code: 2, msg: fmt.Sprintf("check: %v", err)}
	}
	url, token, err := checkTarget(conn, cfg)
	if err != nil {
		return exitError{code: 2, msg: fmt.Sprintf("check: %v", err)}
	}
	client, err := conn.client(url, token)
	if err != nil {
		return exitError{code: 2, msg: fmt.Sprintf("check: %v", err)}
	}
	models, err := client.Models(ctx)
	if err != nil {
		if apiErr, ok := errors.AsType[*adminclient.Error](err); ok {
			return exitError{code: 2, msg: fmt.Sprintf("check: the gateway admin API at %s refused the check: %v", url, apiErr)}
		}
		return exitError{code: 2, msg: fmt.Sprintf("check: cannot reach the gateway: %v", err)}
	}

	rep := checkReport{URL: url, Models: models, Violations: []string{}, Warnings: []string{}}
	var findings []string
	for _, m := range models {
		for _, r := range m.Refused {
			// I11: a worker that disagrees with its model's workers.
			rep.Violations = append(rep.Violations, m.Name)
			findings = append(findings, fmt.Sprintf("FAIL  model %q: worker %s (%s) refused at registration (%d attempts): %s %s",
				m.Name, r.Worker, r.Role, r.Attempts, r.Field, r.Message))
		}
		switch {
		case violates(m):
			rep.Violations = append(rep.Violations, m.Name)
			findings = append(findings, "FAIL  "+violation(m))
		case m.Verdict == adminclient.VerdictNoWorkers:
			w := fmt.Sprintf("model %q: no healthy worker serves it, so its context cannot be audited", m.Name)
			rep.Warnings = append(rep.Warnings, w)
			findings = append(findings, "WARN  "+w)
		}
	}
	if *configPath != "" {
		for _, w := range configDrift(cfg, models, *configPath) {
			rep.Warnings = append(rep.Warnings, w)
			findings = append(findings, "WARN  "+w)
		}
	}

	if conn.json {
		if err := printJSON(e.stdout, rep); err != nil {
			return err
		}
	} else {
		printCheck(e.stdout, url, models, findings)
	}
	if len(rep.Violations) > 0 {
		return exitError{code: 1, msg: fmt.Sprintf("check failed: workers disagree, or configured context exceeds effective context, for %s",
			strings.Join(rep.Violations, ", "))}
	}
	return nil
}

// violates reports whether the model's configured context exceeds its
// effective context (I2).
func violates(m adminclient.ModelView) bool {
	switch m.Verdict {
	case adminclient.VerdictClamped, adminclient.VerdictRefused:
		return true
	case adminclient.VerdictNoWorkers:
		return false
	}
	return m.ConfiguredContext > m.EffectiveContext
}

// violation explains a violating model: the numbers, the pool that limits
// it and what the policy does about it.
func violation(m adminclient.ModelView) string {
	s := fmt.Sprintf("model %q: configured context %d exceeds effective context %d", m.Name, m.ConfiguredContext, m.EffectiveContext)
	var small []string
	for _, w := range m.Workers {
		if w.CapacityTokens < m.ConfiguredContext {
			small = append(small, fmt.Sprintf("%s (%s) holds %d tokens", w.ID, w.Role, w.CapacityTokens))
		}
	}
	if len(small) > 0 {
		s += ": " + strings.Join(small, ", ")
	}
	if m.Degraded {
		// I12: quarantined pages, not the configuration.
		return s + fmt.Sprintf("; degraded: quarantined KV pages leave room for %d tokens (%s). They come back when their writer is proven drained or the worker restarts.",
			m.UsableContext, m.Reason)
	}
	switch m.Policy {
	case string(config.ContextRefuse):
		s += "; policy refuse: the model is not served"
	case string(config.ContextClamp):
		s += fmt.Sprintf("; policy clamp: requests are limited to %d tokens", m.EffectiveContext)
	}
	return s + ". Lower models[].context_length or give the workers a larger KV pool (worker.kv.memory_bytes)."
}

// printCheck prints a table per model and the findings.
func printCheck(w io.Writer, url string, models []adminclient.ModelView, findings []string) {
	fmt.Fprintf(w, "gateway %s: %d models\n", url, len(models))
	for _, m := range models {
		fmt.Fprintf(w, "\nmodel %s: policy %s, configured %d, effective %d, verdict %s, serving %v\n",
			m.Name, orDash(m.Policy), m.ConfiguredContext, m.EffectiveContext, m.Verdict, m.Serving)
		if len(m.Workers) == 0 {
			fmt.Fprintln(w, "  (no serving workers)")
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  WORKER\tROLE\tPOOL CAPACITY (tokens)\tUSABLE NOW\tWEIGHTS\tKV BUDGET\tMEMORY LIMIT (source)\tADAPTERS (used/capacity)")
		for _, wc := range m.Workers {
			note := ""
			if wc.CapacityTokens < m.ConfiguredContext {
				note = "< configured"
			} else if wc.UsableTokens < m.ConfiguredContext {
				note = "quarantine < configured"
			}
			budget, limit := "-", "-"
			if p := wc.Memory; p != nil {
				budget, limit = formatSize(p.BudgetBytes), memoryLimit(p)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", wc.ID, wc.Role, wc.CapacityTokens, wc.UsableTokens,
				orDash(wc.WeightsDType), budget, limit, adapterMemory(wc.Adapters), note)
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w)
	for _, f := range findings {
		fmt.Fprintln(w, f)
	}
	if !anyPrefix(findings, "FAIL") {
		fmt.Fprintln(w, "OK    every model's configured context fits the KV pool of every worker serving it")
	}
}

// adapterMemory describes a worker's LoRA adapter memory: used of
// capacity and how many adapters it holds (pinned); "-" without one.
func adapterMemory(m *adminclient.AdapterMemoryView) string {
	if m == nil {
		return "-"
	}
	return fmt.Sprintf("%s/%s, %d loaded (%d pinned)", formatSize(m.UsedBytes), formatSize(m.CapacityBytes), len(m.Loaded), len(m.Pinned))
}

// memoryLimit describes the bound a worker sized its KV pool within: the
// limit and its source, with the headroom left under a cgroup limit.
func memoryLimit(p *adminclient.MemoryPlan) string {
	switch {
	case p.Source == "configured":
		return "- (worker.kv.memory_bytes)"
	case p.HeadroomBytes > 0:
		return fmt.Sprintf("%s (%s, headroom %s)", formatSize(p.LimitBytes), p.Source, formatSize(p.HeadroomBytes))
	}
	return fmt.Sprintf("%s (%s)", formatSize(p.LimitBytes), p.Source)
}

func anyPrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// configDrift compares the config file's models with the gateway's: a
// gateway started from another file is worth knowing about.
func configDrift(cfg *config.Config, models []adminclient.ModelView, path string) []string {
	served := map[string]adminclient.ModelView{}
	for _, m := range models {
		served[m.Name] = m
	}
	var out []string
	for _, cm := range cfg.Models {
		m, ok := served[cm.Name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("model %q is in %s but the gateway does not know it", cm.Name, path))
		case int64(cm.ContextLength) != m.ConfiguredContext:
			out = append(out, fmt.Sprintf("model %q: %s configures context %d but the gateway runs with %d",
				cm.Name, path, cm.ContextLength, m.ConfiguredContext))
		}
	}
	return out
}

// checkTarget resolves the admin URL, token and CA: flags and WARDEN_ADMIN_*
// first, then the config (gateway.admin_listen, admin_token(_file), the dev
// CA next to gateway.tls.cert_file or cluster.ca_file).
func checkTarget(conn *adminConn, cfg *config.Config) (url, token string, err error) {
	url = conn.url
	if url == "" {
		if url, err = adminURL(cfg.Gateway.AdminListen, cfg.Gateway.TLS.Plaintext); err != nil {
			return "", "", err
		}
	}
	token, err = conn.resolveToken()
	switch {
	case err != nil:
		return "", "", err
	case token != "":
	case cfg.Gateway.AdminToken != "":
		token = cfg.Gateway.AdminToken
	case cfg.Gateway.AdminTokenFile != "":
		if token, err = readTokenFile(cfg.Gateway.AdminTokenFile); err != nil {
			return "", "", err
		}
	default:
		return "", "", fmt.Errorf("no admin token: use --token-file, $%s or gateway.admin_token_file in --config", envAdminToken)
	}
	if conn.caCert == "" {
		conn.caCert = devCA(cfg)
	}
	return url, token, nil
}

// adminURL turns gateway.admin_listen into a URL to dial: a wildcard host
// becomes loopback.
func adminURL(listen string, plaintext bool) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("gateway.admin_listen %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	scheme := "https"
	if plaintext {
		scheme = "http"
	}
	return scheme + "://" + net.JoinHostPort(host, port), nil
}

// devCA returns the CA that signs the admin listener's certificate, if the
// config shows one: ca.pem next to gateway.tls.cert_file (the dev PKI
// layout of internal/tlsutil), else cluster.ca_file.
func devCA(cfg *config.Config) string {
	if cert := cfg.Gateway.TLS.CertFile; cert != "" {
		ca := filepath.Join(filepath.Dir(cert), "ca.pem")
		if _, err := os.Stat(ca); err == nil {
			return ca
		}
	}
	return cfg.Cluster.CAFile
}

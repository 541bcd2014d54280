// Package adminclient is a typed Go client of warden's admin API, used by
// `warden admin`, `warden check` and end-to-end tests. It is also the home
// of the API's wire types (views, request bodies, the error envelope), which
// the server in gateway/internal/admin uses as they are, so that client and
// server cannot drift apart.
//
// Every call takes a context and returns either the decoded answer or an
// error: an *Error when the server answered with an error envelope (its
// message, status and code), otherwise a transport error saying the API
// could not be reached.
package adminclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/warden-ai/warden/internal/errenvelope"
	"github.com/warden-ai/warden/tenant"
)

// DefaultTimeout bounds one call when Config.Timeout is 0.
const DefaultTimeout = 30 * time.Second

// maxResponseBytes bounds what the client reads of one answer.
const maxResponseBytes = 64 << 20

// apiPrefix is the path prefix of every admin route.
const apiPrefix = "/admin/v1"

// Config configures a Client.
type Config struct {
	// URL is the admin listener's base URL, e.g. "https://127.0.0.1:8444".
	URL string
	// Token is the admin bearer token.
	Token string
	// CAFile is a PEM file of CA certificates trusted in addition to the
	// system roots (the dev CA of `warden up`, a private CA).
	CAFile string
	// Timeout bounds each call; 0 means DefaultTimeout.
	Timeout time.Duration
	// Transport replaces the HTTP transport (tests); CAFile is then unused.
	Transport http.RoundTripper
}

// Client calls the admin API. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// New returns a client for cfg. It fails if the URL is not an absolute
// http(s) URL or the CA file cannot be used.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("admin URL %q: want http(s)://host:port", cfg.URL)
	}
	rt := cfg.Transport
	if rt == nil {
		if rt, err = NewTransport(cfg.CAFile); err != nil {
			return nil, err
		}
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{base: u, token: cfg.Token, http: &http.Client{Transport: rt, Timeout: timeout}}, nil
}

// NewTransport returns an HTTP transport (TLS 1.2 or later) that trusts
// the system roots and, when caFile is not empty, the CA certificates in
// it: the admin client's, and `warden health`'s.
func NewTransport(caFile string) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadRoots(caFile)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	return tr, nil
}

// loadRoots returns the system roots plus the certificates in file.
func loadRoots(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// URL returns the base URL the client calls.
func (c *Client) URL() string { return c.base.String() }

// do sends one request: in (if not nil) as the JSON body, the answer
// decoded into out (if not nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	// path is already escaped segment by segment (seg).
	target := c.base.String() + apiPrefix + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var body io.Reader
	contentType := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body, contentType = bytes.NewReader(b), "application/json"
	}
	return c.send(ctx, method, path, target, body, contentType, out)
}

// send sends one request with body of contentType ("" for none) to
// target and decodes the answer into out (if not nil).
func (c *Client) send(ctx context.Context, method, path, target string, body io.Reader, contentType string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // it repeats the URL
		}
		return fmt.Errorf("admin API at %s unreachable: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("admin API at %s: read answer: %w", c.base, err)
	}
	if resp.StatusCode/100 != 2 {
		return decodeError(resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("admin API at %s: bad answer to %s %s: %w", c.base, method, path, err)
	}
	return nil
}

// decodeError turns an error answer into an *Error, whether or not it
// carries the envelope (a proxy may answer in its own way).
func decodeError(status int, data []byte) *Error {
	if b, err := errenvelope.Decode(data); err == nil && b.Message != "" {
		return &Error{Status: status, Type: b.Type, Message: b.Message, Code: b.CodeOrEmpty(), Param: b.ParamOrEmpty()}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Status: status, Message: msg}
}

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// seg escapes one path segment (model names may contain "/").
func seg(s string) string { return url.PathEscape(s) }

// CreateTenant creates a tenant.
func (c *Client) CreateTenant(ctx context.Context, t TenantCreate) (tenant.Tenant, error) {
	var out tenant.Tenant
	err := c.do(ctx, http.MethodPost, "/tenants", nil, t, &out)
	return out, err
}

// ListTenants returns every tenant, sorted by ID.
func (c *Client) ListTenants(ctx context.Context) ([]tenant.Tenant, error) {
	var out List[tenant.Tenant]
	err := c.do(ctx, http.MethodGet, "/tenants", nil, nil, &out)
	return out.Data, err
}

// GetTenant returns one tenant.
func (c *Client) GetTenant(ctx context.Context, id string) (tenant.Tenant, error) {
	var out tenant.Tenant
	err := c.do(ctx, http.MethodGet, "/tenants/"+seg(id), nil, nil, &out)
	return out, err
}

// UpdateTenant changes the fields set in p and returns the tenant.
func (c *Client) UpdateTenant(ctx context.Context, id string, p TenantPatch) (tenant.Tenant, error) {
	var out tenant.Tenant
	err := c.do(ctx, http.MethodPatch, "/tenants/"+seg(id), nil, p, &out)
	return out, err
}

// DeleteTenant deletes a tenant and revokes its keys.
func (c *Client) DeleteTenant(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/tenants/"+seg(id), nil, nil, nil)
}

// IssueKey creates an API key for a tenant. The plaintext key in the
// answer is shown this once.
func (c *Client) IssueKey(ctx context.Context, tenantID, name string) (IssuedKey, error) {
	var out IssuedKey
	err := c.do(ctx, http.MethodPost, "/tenants/"+seg(tenantID)+"/keys", nil, KeyCreate{Name: name}, &out)
	return out, err
}

// KeyFilter selects keys for ListKeys; empty fields match everything.
type KeyFilter struct {
	Tenant string
	// Prefix matches the start of the key's display prefix, "wdn_<id>".
	Prefix string
}

// ListKeys returns the keys matching f, revoked ones included.
func (c *Client) ListKeys(ctx context.Context, f KeyFilter) ([]tenant.KeyInfo, error) {
	q := url.Values{}
	if f.Tenant != "" {
		q.Set("tenant", f.Tenant)
	}
	if f.Prefix != "" {
		q.Set("prefix", f.Prefix)
	}
	var out List[tenant.KeyInfo]
	err := c.do(ctx, http.MethodGet, "/keys", q, nil, &out)
	return out.Data, err
}

// RevokeKey revokes a key by its ID and returns its description.
func (c *Client) RevokeKey(ctx context.Context, keyID string) (tenant.KeyInfo, error) {
	var out tenant.KeyInfo
	err := c.do(ctx, http.MethodDelete, "/keys/"+seg(keyID), nil, nil, &out)
	return out, err
}

// ListModelLimits returns every model's limits, sorted by model.
func (c *Client) ListModelLimits(ctx context.Context) ([]tenant.ModelLimits, error) {
	var out List[tenant.ModelLimits]
	err := c.do(ctx, http.MethodGet, "/model-limits", nil, nil, &out)
	return out.Data, err
}

// GetModelLimits returns one model's limits.
func (c *Client) GetModelLimits(ctx context.Context, model string) (tenant.ModelLimits, error) {
	var out tenant.ModelLimits
	err := c.do(ctx, http.MethodGet, "/model-limits/"+seg(model), nil, nil, &out)
	return out, err
}

// SetModelLimits creates or replaces m.Model's limits.
func (c *Client) SetModelLimits(ctx context.Context, m tenant.ModelLimits) (tenant.ModelLimits, error) {
	var out tenant.ModelLimits
	err := c.do(ctx, http.MethodPut, "/model-limits/"+seg(m.Model), nil, m, &out)
	return out, err
}

// DeleteModelLimits removes a model's limits.
func (c *Client) DeleteModelLimits(ctx context.Context, model string) error {
	return c.do(ctx, http.MethodDelete, "/model-limits/"+seg(model), nil, nil, nil)
}

// AdapterUpload is a LoRA adapter to register (CreateAdapter).
type AdapterUpload struct {
	// Base is the served model; Name the adapter's name on it (the
	// registry name is Base:Name).
	Base, Name string
	Owner      string
	SharedWith []string
	Pin        bool
	// ConfigJSON and Weights are adapter_config.json and
	// adapter_model.safetensors.
	ConfigJSON, Weights []byte
}

// CreateAdapter uploads and registers an adapter (multipart/form-data).
func (c *Client) CreateAdapter(ctx context.Context, u AdapterUpload) (tenant.Adapter, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fields := [][2]string{{AdapterFieldBase, u.Base}, {AdapterFieldName, u.Name}, {AdapterFieldOwner, u.Owner},
		{AdapterFieldPin, strconv.FormatBool(u.Pin)}}
	for _, t := range u.SharedWith {
		fields = append(fields, [2]string{AdapterFieldSharedWith, t})
	}
	for _, f := range fields {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			return tenant.Adapter{}, fmt.Errorf("encode upload: %w", err)
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{AdapterFileConfig, u.ConfigJSON}, {AdapterFileWeights, u.Weights}} {
		fw, err := mw.CreateFormFile(f.name, f.name)
		if err == nil {
			_, err = fw.Write(f.data)
		}
		if err != nil {
			return tenant.Adapter{}, fmt.Errorf("encode upload: %w", err)
		}
	}
	if err := mw.Close(); err != nil {
		return tenant.Adapter{}, fmt.Errorf("encode upload: %w", err)
	}
	var out tenant.Adapter
	err := c.send(ctx, http.MethodPost, "/adapters", c.base.String()+apiPrefix+"/adapters", &buf, mw.FormDataContentType(), &out)
	return out, err
}

// ListAdapters returns every registered adapter, sorted by name.
func (c *Client) ListAdapters(ctx context.Context) ([]tenant.Adapter, error) {
	var out List[tenant.Adapter]
	err := c.do(ctx, http.MethodGet, "/adapters", nil, nil, &out)
	return out.Data, err
}

// GetAdapter returns the adapter named name (base:adapter).
func (c *Client) GetAdapter(ctx context.Context, name string) (tenant.Adapter, error) {
	var out tenant.Adapter
	err := c.do(ctx, http.MethodGet, "/adapters/"+seg(name), nil, nil, &out)
	return out, err
}

// UpdateAdapter changes the tenants an adapter is shared with and its pin.
func (c *Client) UpdateAdapter(ctx context.Context, name string, p AdapterPatch) (tenant.Adapter, error) {
	var out tenant.Adapter
	err := c.do(ctx, http.MethodPatch, "/adapters/"+seg(name), nil, p, &out)
	return out, err
}

// DeleteAdapter removes an adapter.
func (c *Client) DeleteAdapter(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/adapters/"+seg(name), nil, nil, nil)
}

// ListAliases returns the model aliases in effect, sorted by name.
func (c *Client) ListAliases(ctx context.Context) ([]Alias, error) {
	var out List[Alias]
	err := c.do(ctx, http.MethodGet, "/aliases", nil, nil, &out)
	return out.Data, err
}

// SetAlias creates alias name or points it at model target.
func (c *Client) SetAlias(ctx context.Context, name, target string) (Alias, error) {
	var out Alias
	err := c.do(ctx, http.MethodPut, "/aliases/"+seg(name), nil, AliasSet{Target: target}, &out)
	return out, err
}

// DeleteAlias removes an alias set through the admin API.
func (c *Client) DeleteAlias(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/aliases/"+seg(name), nil, nil, nil)
}

// Usage returns a tenant's usage for the UTC days from..to, inclusive, as
// "2006-01-02"; empty means today.
func (c *Client) Usage(ctx context.Context, tenantID, from, to string) ([]tenant.Usage, error) {
	q := url.Values{"tenant": {tenantID}}
	if from != "" {
		q.Set("from", from)
	}
	if to != "" {
		q.Set("to", to)
	}
	var out List[tenant.Usage]
	err := c.do(ctx, http.MethodGet, "/usage", q, nil, &out)
	return out.Data, err
}

// Workers returns the registered workers.
func (c *Client) Workers(ctx context.Context) ([]WorkerView, error) {
	var out List[WorkerView]
	err := c.do(ctx, http.MethodGet, "/workers", nil, nil, &out)
	return out.Data, err
}

// CordonWorker stops new placements on worker id; its requests run on.
func (c *Client) CordonWorker(ctx context.Context, id string) (WorkerView, error) {
	return c.workerAction(ctx, id, "cordon")
}

// UncordonWorker lets the gateway place requests on worker id again.
func (c *Client) UncordonWorker(ctx context.Context, id string) (WorkerView, error) {
	return c.workerAction(ctx, id, "uncordon")
}

// DrainWorker cordons worker id and returns its state: Idle tells whether
// its requests have all ended (call Workers, or DrainWorker again, until it
// is).
func (c *Client) DrainWorker(ctx context.Context, id string) (WorkerView, error) {
	return c.workerAction(ctx, id, "drain")
}

func (c *Client) workerAction(ctx context.Context, id, action string) (WorkerView, error) {
	var out WorkerView
	err := c.do(ctx, http.MethodPost, "/workers/"+seg(id)+"/"+action, nil, nil, &out)
	return out, err
}

// Models returns the configured models with their context agreement.
func (c *Client) Models(ctx context.Context) ([]ModelView, error) {
	var out List[ModelView]
	err := c.do(ctx, http.MethodGet, "/models", nil, nil, &out)
	return out.Data, err
}

// RequestFilter selects in-flight requests; empty fields match everything.
type RequestFilter struct {
	Tenant string
	Model  string
}

// Requests returns the requests in flight.
func (c *Client) Requests(ctx context.Context, f RequestFilter) ([]RequestView, error) {
	q := url.Values{}
	if f.Tenant != "" {
		q.Set("tenant", f.Tenant)
	}
	if f.Model != "" {
		q.Set("model", f.Model)
	}
	var out List[RequestView]
	err := c.do(ctx, http.MethodGet, "/requests", q, nil, &out)
	return out.Data, err
}

// Request returns one request, in flight or recently finished.
func (c *Client) Request(ctx context.Context, id string) (RequestView, error) {
	var out RequestView
	err := c.do(ctx, http.MethodGet, "/requests/"+seg(id), nil, nil, &out)
	return out, err
}

// AbortRequest aborts a request in flight (cause "admin").
func (c *Client) AbortRequest(ctx context.Context, id string) (AbortResult, error) {
	var out AbortResult
	err := c.do(ctx, http.MethodPost, "/requests/"+seg(id)+"/abort", nil, nil, &out)
	return out, err
}

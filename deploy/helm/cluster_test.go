package helm_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/test/harness"
)

// localCluster runs a rendered release as local processes, doing what a
// node's kubelet, kube-proxy and the cluster DNS do, and no more:
//
//   - Every pod gets an address of its own on the loopback network
//     (127.a.b.n: Linux routes all of 127/8 to lo), standing for its pod
//     IP, and every ClusterIP Service one more, where a proxy forwards
//     each connection to a ready pod the Service selects (kube-proxy).
//   - Volumes are directories: ConfigMap and Secret volumes hold the
//     rendered (or the operator's external) keys as files, with items as
//     rendered; emptyDir and persistentVolumeClaim volumes are empty
//     directories, except where a warden worker's model_dir lies, which
//     holds the test's model.
//   - Each container runs its command and args with exactly its
//     environment (fieldRef, secretKeyRef and configMapKeyRef resolved,
//     $(VAR) expanded as the kubelet does), the warden binary built from
//     this repository standing for the warden image and the local
//     redis-server for the Redis image.
//
// Three rewrites, applied to every argument, environment value and
// ConfigMap file, stand in for what a container has and a local process
// has not: a mount path becomes its volume's directory, a Service or
// StatefulSet pod DNS name becomes its address (the cluster DNS), and
// 0.0.0.0, all of a pod's own interfaces, becomes the pod's address (its
// network namespace). Redis, which takes no 0.0.0.0 to rewrite, is given
// --bind with its address for the same reason.
//
// Ports stay as rendered, on each pod's own address; a process of this
// machine that listens on one of them on every address (0.0.0.0) stops
// the test with an error saying so. A Service's privileged port (443)
// that the test may not bind moves to a free port for the test's own
// clients.
type localCluster struct {
	t    *testing.T
	objs map[string]object
	dir  string
	base string // "127.a.b."
	next int

	pods     []*localPod
	services []*localService
	// names maps DNS names to addresses.
	names map[string]string
	// external are the operator's Secrets (by name), standing for
	// cert-manager's or a secrets manager's.
	external map[string]map[string][]byte
	// dns rewrites the cluster's DNS names to addresses.
	dns rewrite
	// moved maps a Service's privileged address that the test may not
	// bind to the one its proxy listens on (for the test's clients).
	moved map[string]string
}

// localPod is one replica of a rendered pod template.
type localPod struct {
	name string
	ip   string
	w    workload
	dir  string
	// procs run its containers (by container name).
	procs map[string]*harness.Process
	// wardenRole is "gateway" or "worker" for a warden container.
	wardenRole string
	// config is the warden config the process reads (rewritten).
	config *config.Config
	// gate holds a worker in its weight loading (see gateModel).
	gate *modelGate
	// mounts rewrites mount paths to the volumes' directories.
	mounts rewrite
}

// localService is a rendered Service.
type localService struct {
	svc *corev1.Service
	ip  string // "" for a headless Service
	rr  int
	mu  sync.Mutex
}

// rewrite replaces words in text: each key of to that stands where
// before accepts the character ahead of it and after the one behind it
// (the text's ends always do), the longest key first, in one pass (a
// replacement is never rewritten again).
type rewrite struct {
	to            map[string]string
	keys          []string
	before, after func(byte) bool
}

func newRewrite(to map[string]string, before, after func(byte) bool) rewrite {
	keys := slices.SortedFunc(maps.Keys(to), func(x, y string) int { return cmp.Compare(len(y), len(x)) })
	return rewrite{to: to, keys: keys, before: before, after: after}
}

func (r rewrite) apply(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if i == 0 || r.before(s[i-1]) {
			if k, ok := r.match(s, i); ok {
				b.WriteString(r.to[k])
				i += len(k)
				continue
			}
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

func (r rewrite) match(s string, i int) (string, bool) {
	for _, k := range r.keys {
		if strings.HasPrefix(s[i:], k) && (i+len(k) == len(s) || r.after(s[i+len(k)])) {
			return k, true
		}
	}
	return "", false
}

// Word boundaries of the rewrites: a DNS name is not inside a longer
// name, 0.0.0.0 not inside a longer address, and a mount path starts a
// value and ends it or goes on with "/".
func notIn(set string) func(byte) bool {
	return func(c byte) bool { return !strings.ContainsRune(set, rune(c)) }
}

var (
	hostChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-"
	pathStart = func(c byte) bool { return strings.ContainsRune(" \t\n\"'=:,[", rune(c)) }
	pathEnd   = func(c byte) bool { return strings.ContainsRune("/ \t\n\"',]", rune(c)) }
)

// newLocalCluster gives the release's pods and Services their addresses
// and DNS names; start lays out the volumes and runs it.
func newLocalCluster(t *testing.T, objs map[string]object) *localCluster {
	t.Helper()
	a, err := rand.Int(rand.Reader, big.NewInt(200))
	if err != nil {
		t.Fatal(err)
	}
	b, err := rand.Int(rand.Reader, big.NewInt(250))
	if err != nil {
		t.Fatal(err)
	}
	c := &localCluster{t: t, objs: objs, dir: t.TempDir(), base: fmt.Sprintf("127.%d.%d.", 20+a.Int64(), 1+b.Int64()),
		names: map[string]string{}, moved: map[string]string{}}
	for _, w := range workloads(objs) {
		for i := range w.replicas {
			p := &localPod{name: fmt.Sprintf("%s-%d", w.name, i), ip: c.addr(), w: w, procs: map[string]*harness.Process{}}
			p.dir = filepath.Join(c.dir, p.name)
			c.pods = append(c.pods, p)
		}
	}
	for _, id := range sortedIDs(objs) {
		svc, ok := objs[id].value.(*corev1.Service)
		if !ok {
			continue
		}
		s := &localService{svc: svc}
		if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			s.ip = c.addr()
			c.addNames(svc.Name, s.ip)
		} else if ps := c.selected(svc, false); len(ps) > 0 {
			c.addNames(svc.Name, ps[0].ip)
		}
		for _, p := range c.pods {
			if svc.Spec.ClusterIP == corev1.ClusterIPNone && p.w.serviceName == svc.Name && matches(svc.Spec.Selector, p.w.template.Labels) {
				c.addNames(p.name+"."+svc.Name, p.ip)
			}
		}
		c.services = append(c.services, s)
	}
	return c
}

// externalHost gives a host outside the release (the operator's Redis,
// say) an address of the cluster's network and returns it.
func (c *localCluster) externalHost(host string) string {
	ip := c.addr()
	c.names[host] = ip
	return ip
}

// layout compiles the DNS rewrites and writes every pod's volumes, with
// the operator's Secrets (by name) where a pod mounts one the chart does
// not render.
func (c *localCluster) layout(external map[string]map[string][]byte) {
	c.external = external
	c.dns = newRewrite(c.names, notIn(hostChars), notIn(hostChars))
	for _, p := range c.pods {
		c.layoutPod(p)
	}
}

// addr returns the next free address of the cluster's network.
func (c *localCluster) addr() string {
	c.next++
	if c.next > 250 {
		c.t.Fatal("more than 250 addresses")
	}
	return c.base + strconv.Itoa(c.next)
}

// addNames maps a name in the namespace, in all its DNS forms, to ip.
func (c *localCluster) addNames(name, ip string) {
	for _, suffix := range []string{"", "." + namespace, "." + namespace + ".svc", "." + namespace + ".svc.cluster.local"} {
		c.names[name+suffix] = ip
	}
}

// selected returns the pods a Service selects; ready: only those whose
// readiness probe passes (unless the Service publishes unready pods).
func (c *localCluster) selected(svc *corev1.Service, ready bool) []*localPod {
	var out []*localPod
	for _, p := range c.pods {
		if !matches(svc.Spec.Selector, p.w.template.Labels) {
			continue
		}
		if ready && !svc.Spec.PublishNotReadyAddresses && !c.ready(p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// ready reports whether every container of a pod passes its readiness
// probe (a container without one is ready once started).
func (c *localCluster) ready(p *localPod) bool {
	for _, ctr := range p.w.template.Spec.Containers {
		if err := c.probe(p, ctr, ctr.ReadinessProbe); err != nil && err != errNoProbe {
			return false
		}
	}
	return true
}

// rewrite applies the DNS, pod address and mount path rewrites to s.
func (c *localCluster) rewrite(p *localPod, s string) string {
	s = c.dns.apply(s)
	s = newRewrite(map[string]string{"0.0.0.0": p.ip}, notIn("0123456789."), notIn("0123456789.")).apply(s)
	s = p.mounts.apply(s)
	return s
}

// layoutPod writes a pod's volumes and records its mount path rewrites.
func (c *localCluster) layoutPod(p *localPod) {
	t := c.t
	spec := p.w.template.Spec
	vols := map[string]string{}
	for _, v := range spec.Volumes {
		dir := filepath.Join(p.dir, "volumes", v.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		vols[v.Name] = dir
		switch {
		case v.ConfigMap != nil:
			cm := get[corev1.ConfigMap](t, c.objs, "ConfigMap/"+v.ConfigMap.Name)
			data := map[string][]byte{}
			for k, s := range cm.Data {
				data[k] = []byte(s)
			}
			// Config files are rewritten below, once every mount is known.
			writeKeys(t, dir, data, v.ConfigMap.Items)
		case v.Secret != nil:
			data := c.external[v.Secret.SecretName]
			if o, ok := c.objs["Secret/"+v.Secret.SecretName]; ok {
				s := o.value.(*corev1.Secret)
				data = s.Data
			} else if data == nil {
				t.Fatalf("pod %s: Secret %s is neither rendered nor given by the test", p.name, v.Secret.SecretName)
			}
			writeKeys(t, dir, data, v.Secret.Items)
		case v.EmptyDir != nil, v.PersistentVolumeClaim != nil:
		default:
			t.Fatalf("pod %s: volume %s: no local stand-in for its source", p.name, v.Name)
		}
	}
	paths := map[string]string{}
	for _, m := range spec.Containers[0].VolumeMounts {
		paths[m.MountPath] = filepath.Join(vols[m.Name], m.SubPath)
	}
	p.mounts = newRewrite(paths, pathStart, pathEnd)
	// Rewrite the ConfigMap files now that every mount is known.
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		entries, err := os.ReadDir(vols[v.Name])
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			f := filepath.Join(vols[v.Name], e.Name())
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(c.rewrite(p, string(data))), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// writeKeys writes a ConfigMap's or Secret's keys into dir as a volume
// does: every key, or only items at their paths.
func writeKeys(t *testing.T, dir string, data map[string][]byte, items []corev1.KeyToPath) {
	t.Helper()
	files := map[string][]byte{}
	if len(items) == 0 {
		for k, v := range data {
			files[k] = v
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			t.Fatalf("volume item %s: no such key", it.Key)
		}
		files[it.Path] = v
	}
	for name, v := range files {
		f := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// command returns what runs a container locally and its arguments
// (rewritten).
func (c *localCluster) command(p *localPod, ctr corev1.Container) (bin string, args []string) {
	t := c.t
	argv := append(slices.Clone(ctr.Command), ctr.Args...)
	for i := range argv {
		argv[i] = c.rewrite(p, argv[i])
	}
	image := ctr.Image
	switch {
	case strings.HasPrefix(image, "redis:"):
		// The image's entrypoint runs its arguments: redis-server ….
		path, err := exec.LookPath(argv[0])
		if err != nil {
			t.Fatalf("pod %s runs %s: %v", p.name, argv[0], err)
		}
		return path, append(argv[1:], "--bind", p.ip, "--dir", p.dir)
	case len(ctr.Command) == 0 || ctr.Command[0] == "warden":
		// The warden image: its entrypoint is the warden binary.
		if len(ctr.Command) > 0 {
			argv = argv[1:]
		}
		return env.Bin, argv
	}
	t.Fatalf("pod %s: no local stand-in for image %s", p.name, image)
	return "", nil
}

// environ returns a container's environment as the kubelet gives it.
func (c *localCluster) environ(p *localPod, ctr corev1.Container) []string {
	t := c.t
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	keyOf := func(kind, name, key string) string {
		o, ok := c.objs[kind+"/"+name]
		if !ok {
			if d, ok := c.external[name]; ok && kind == "Secret" {
				return string(d[key])
			}
			t.Fatalf("pod %s: %s %s not rendered", p.name, kind, name)
		}
		switch v := o.value.(type) {
		case *corev1.Secret:
			return string(v.Data[key])
		case *corev1.ConfigMap:
			return v.Data[key]
		}
		return ""
	}
	for _, ef := range ctr.EnvFrom {
		var data map[string]string
		switch {
		case ef.ConfigMapRef != nil:
			data = get[corev1.ConfigMap](t, c.objs, "ConfigMap/"+ef.ConfigMapRef.Name).Data
		case ef.SecretRef != nil:
			data = map[string]string{}
			for k, v := range get[corev1.Secret](t, c.objs, "Secret/"+ef.SecretRef.Name).Data {
				data[k] = string(v)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(data)) {
			set(ef.Prefix+k, data[k])
		}
	}
	for _, e := range ctr.Env {
		v := e.Value
		switch f := e.ValueFrom; {
		case f == nil:
			v = expand(v, vars)
		case f.FieldRef != nil:
			switch f.FieldRef.FieldPath {
			case "status.podIP":
				v = p.ip
			case "metadata.name":
				v = p.name
			case "metadata.namespace":
				v = namespace
			default:
				t.Fatalf("pod %s: env %s: fieldRef %s has no local value", p.name, e.Name, f.FieldRef.FieldPath)
			}
		case f.SecretKeyRef != nil:
			v = keyOf("Secret", f.SecretKeyRef.Name, f.SecretKeyRef.Key)
		case f.ConfigMapKeyRef != nil:
			v = keyOf("ConfigMap", f.ConfigMapKeyRef.Name, f.ConfigMapKeyRef.Key)
		default:
			t.Fatalf("pod %s: env %s: no local value for %+v", p.name, e.Name, f)
		}
		set(e.Name, v)
	}
	out := []string{"PATH=" + os.Getenv("PATH"), "HOSTNAME=" + p.name, "HOME=" + p.dir}
	for _, k := range order {
		out = append(out, k+"="+c.rewrite(p, vars[k]))
	}
	return out
}

// expand expands $(VAR) references to earlier variables as the kubelet
// does: $$ is a literal $, an unknown reference stays as it is.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if j := strings.IndexByte(s[i:], ')'); j > 0 {
				if v, ok := vars[s[i+2:i+j]]; ok {
					b.WriteString(v)
					i += j
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// start runs every pod's containers and the Services' proxies; all stop
// when the test ends.
func (c *localCluster) start() {
	t := c.t
	for _, s := range c.services {
		if s.ip != "" {
			c.proxy(s)
		}
	}
	for _, p := range c.pods {
		if err := os.MkdirAll(p.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if len(p.w.template.Spec.InitContainers) > 0 {
			t.Fatalf("pod %s has init containers, which the test does not run yet", p.name)
		}
		for _, ctr := range p.w.template.Spec.Containers {
			bin, args := c.command(p, ctr)
			if bin == env.Bin && len(args) > 0 {
				p.wardenRole = args[0]
				p.config = c.podConfig(p, args)
				if p.wardenRole == "worker" {
					p.gate = gateModel(t, p.config.Worker.ModelDir)
				}
			}
			proc := env.NewProcess(p.name+"/"+ctr.Name, filepath.Join(c.dir, p.name+"-"+ctr.Name+".log"), args...)
			proc.Bin = bin
			proc.Env = c.environ(p, ctr)
			proc.Dir = p.dir
			if err := proc.Start(); err != nil {
				t.Fatal(err)
			}
			p.procs[ctr.Name] = proc
			t.Cleanup(func() {
				if err := proc.Stop(harness.StopGrace); err != nil {
					t.Logf("%s: %v", proc.Name, err)
				}
				if t.Failed() {
					t.Logf("log of %s:\n%s", proc.Name, proc.LogTail(40))
				}
			})
		}
	}
}

// podConfig loads the warden config a pod's process reads (--config,
// rewritten) with its environment, as the process does.
func (c *localCluster) podConfig(p *localPod, args []string) *config.Config {
	t := c.t
	i := slices.Index(args, "--config")
	if i < 0 || i+1 == len(args) {
		t.Fatalf("pod %s: warden %v has no --config", p.name, args)
	}
	data, err := os.ReadFile(args[i+1])
	if err != nil {
		t.Fatalf("pod %s: %v", p.name, err)
	}
	cfg, err := config.LoadBytes(data)
	if err != nil {
		t.Fatalf("pod %s: %v", p.name, err)
	}
	var environ []string
	for _, e := range c.environ(p, p.w.template.Spec.Containers[0]) {
		if strings.HasPrefix(e, "WARDEN_") {
			environ = append(environ, e)
		}
	}
	if err := cfg.ApplyEnv(environ); err != nil {
		t.Fatalf("pod %s: %v", p.name, err)
	}
	return cfg
}

// proxy forwards each connection to a Service's ports to a ready pod it
// selects, in turn (kube-proxy).
func (c *localCluster) proxy(s *localService) {
	t := c.t
	for _, sp := range s.svc.Spec.Ports {
		addr := net.JoinHostPort(s.ip, strconv.Itoa(int(sp.Port)))
		ln, err := net.Listen("tcp", addr)
		if errors.Is(err, syscall.EACCES) && sp.Port < 1024 {
			// A privileged port (443) without the privilege: another
			// port, which the test's clients dial instead.
			if ln, err = net.Listen("tcp", net.JoinHostPort(s.ip, "0")); err == nil {
				c.moved[addr] = ln.Addr().String()
			}
		}
		if err != nil {
			t.Fatalf("Service %s (another process may listen on the port on all addresses): %v", s.svc.Name, err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				go c.forward(s, sp, conn)
			}
		}()
	}
}

func (c *localCluster) forward(s *localService, sp corev1.ServicePort, conn net.Conn) {
	defer conn.Close()
	pods := c.selected(s.svc, true)
	if len(pods) == 0 {
		return // no endpoints: the connection is refused, as by kube-proxy
	}
	s.mu.Lock()
	s.rr++
	p := pods[s.rr%len(pods)]
	s.mu.Unlock()
	tp := sp.TargetPort
	if tp.Type == intstr.Int && tp.IntVal == 0 {
		tp = intstr.FromInt32(sp.Port)
	}
	port, ok := containerPort(p.w.template.Spec.Containers[0], tp)
	if !ok {
		return
	}
	up, err := net.Dial("tcp", net.JoinHostPort(p.ip, strconv.Itoa(int(port))))
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, conn); _ = up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, up); _ = conn.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// errNoProbe is the result of a probe the container does not have.
var errNoProbe = errors.New("no such probe")

// probe runs a probe once as the kubelet does (HTTPS without verifying,
// a success is a status in [200, 400)). An exec probe runs inside the
// container, where localhost is the pod; the test stands in for it by
// connecting to every port the container declares.
func (c *localCluster) probe(p *localPod, ctr corev1.Container, pr *corev1.Probe) error {
	if pr == nil {
		return errNoProbe
	}
	timeout := time.Duration(max(pr.TimeoutSeconds, 1)) * time.Second
	port := func(ip intstr.IntOrString) string {
		n, _ := containerPort(ctr, ip)
		if ip.Type == intstr.Int {
			n = ip.IntVal
		}
		return net.JoinHostPort(p.ip, strconv.Itoa(int(n)))
	}
	switch {
	case pr.HTTPGet != nil:
		h := pr.HTTPGet
		scheme := strings.ToLower(string(cmp.Or(h.Scheme, corev1.URISchemeHTTP)))
		client := &http.Client{Timeout: timeout, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet
			DisableKeepAlives: true,
		}}
		req, err := http.NewRequest(http.MethodGet, scheme+"://"+port(h.Port)+h.Path, nil)
		if err != nil {
			return err
		}
		for _, hd := range h.HTTPHeaders {
			req.Header.Set(hd.Name, hd.Value)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("%s: %s", req.URL, resp.Status)
		}
		return nil
	case pr.TCPSocket != nil:
		conn, err := net.DialTimeout("tcp", port(pr.TCPSocket.Port), timeout)
		if err == nil {
			conn.Close()
		}
		return err
	case pr.Exec != nil:
		for _, cp := range ctr.Ports {
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(p.ip, strconv.Itoa(int(cp.ContainerPort))), timeout)
			if err != nil {
				return err
			}
			conn.Close()
		}
		return nil
	}
	return fmt.Errorf("pod %s: a probe the test cannot run: %+v", p.name, pr)
}

// waitFor polls check until it returns nil or timeout passes, failing
// early if a process of the cluster exited; it returns the last error.
func (c *localCluster) waitFor(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		for _, p := range c.pods {
			for _, proc := range p.procs {
				select {
				case <-proc.Done():
					return fmt.Errorf("%s exited (%v): %w; log:\n%s", proc.Name, proc.ExitErr(), err, proc.LogTail(30))
				default:
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dial connects to addr, resolving the cluster's DNS names as its pods
// do: the test's clients run "in the cluster".
func (c *localCluster) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip, ok := c.names[host]; ok {
		addr = net.JoinHostPort(ip, port)
	}
	if moved, ok := c.moved[addr]; ok {
		addr = moved
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// modelGate holds a worker in its weight loading: the model directory's
// config.json is a FIFO, so the worker's first read of it blocks until
// release writes the file (and puts the real file in its place).
type modelGate struct {
	path string
	data []byte
	once sync.Once
	done chan struct{}
}

// gateModel fills dir with the test's model (env.Models[ModelTiny]), its
// config.json a FIFO.
func gateModel(t *testing.T, dir string) *modelGate {
	t.Helper()
	src := env.Models[harness.ModelTiny]
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	g := &modelGate{path: filepath.Join(dir, "config.json"), done: make(chan struct{})}
	for _, e := range entries {
		if e.Name() == "config.json" {
			if g.data, err = os.ReadFile(filepath.Join(src, e.Name())); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(g.path, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.release)
	return g
}

// release lets the worker read config.json: once the worker holds the
// FIFO open, the real file replaces it (later opens read the file) and
// the FIFO delivers the content.
func (g *modelGate) release() {
	g.once.Do(func() {
		go func() {
			defer close(g.done)
			f, err := os.OpenFile(g.path, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			defer f.Close()
			tmp := g.path + ".tmp"
			if os.WriteFile(tmp, g.data, 0o644) == nil {
				_ = os.Rename(tmp, g.path)
			}
			_, _ = f.Write(g.data)
		}()
	})
}

// sortedIDs returns the object IDs in order.
func sortedIDs(objs map[string]object) []string {
	return slices.Sorted(maps.Keys(objs))
}

// TestRewrite checks the rewrites' word boundaries: a Service's name
// inside its pods' names, names one character apart, a mount at /tmp
// that the other mounts' directories lie under, 0.0.0.0 inside a longer
// address.
func TestRewrite(t *testing.T) {
	dns := newRewrite(map[string]string{"svc": "10.0.0.1", "svc.ns": "10.0.0.1", "pod-0.svc": "10.0.0.2", "pod-1.svc": "10.0.0.3"},
		notIn(hostChars), notIn(hostChars))
	for in, want := range map[string]string{
		"svc:80 svc.ns:80 svc.other:80 mysvc:80": "10.0.0.1:80 10.0.0.1:80 svc.other:80 mysvc:80",
		"[pod-0.svc,pod-1.svc] pod-2.svc":        "[10.0.0.2,10.0.0.3] pod-2.svc",
	} {
		if got := dns.apply(in); got != want {
			t.Errorf("DNS rewrite of %q = %q, want %q", in, got, want)
		}
	}
	mounts := newRewrite(map[string]string{"/tmp": "/tmp/t/tmp", "/etc/warden": "/tmp/t/warden"}, pathStart, pathEnd)
	in := "file: /etc/warden/a.yaml\ndir: /tmp\nx: /tmpfoo,/etc/warden,/etc/wardens\n--config=/tmp/b"
	want := "file: /tmp/t/warden/a.yaml\ndir: /tmp/t/tmp\nx: /tmpfoo,/tmp/t/warden,/etc/wardens\n--config=/tmp/t/tmp/b"
	if got := mounts.apply(in); got != want {
		t.Errorf("mount rewrite of %q = %q, want %q", in, got, want)
	}
	addr := newRewrite(map[string]string{"0.0.0.0": "127.9.9.9"}, notIn("0123456789."), notIn("0123456789."))
	if got := addr.apply("0.0.0.0:80 10.0.0.0:80 0.0.0.01"); got != "127.9.9.9:80 10.0.0.0:80 0.0.0.01" {
		t.Errorf("0.0.0.0 rewrite: %q", got)
	}
}

// Package redistest gives tests a Redis: the one named by
// WARDEN_TEST_REDIS_ADDR (default 127.0.0.1:6379) when it answers, otherwise
// a private redis-server on a free port in a temporary directory, stopped
// when the test ends. Without redis-server installed, tests fail when
// CI=true and are skipped otherwise. The tenant stores' tests use it, and
// the end-to-end harness (test/harness) runs its own redis-server
// processes with Binary and Ping. StartCluster runs a private three-master
// Redis Cluster (StartClusterWith: with a replica each, to fail over), StartSentinel a
// master and its replica watched by a Redis Sentinel.
package redistest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/tenant/redisstore"
)

// EnvAddr names the environment variable with the address of a test Redis.
const EnvAddr = "WARDEN_TEST_REDIS_ADDR"

const defaultAddr = "127.0.0.1:6379"

// Addr returns the address of a Redis that answers PING, starting a private
// server if neither EnvAddr nor the default address answers.
func Addr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		addr = defaultAddr
	}
	if Ping(addr, time.Second) == nil {
		return addr
	}
	t.Logf("no Redis answers on %s; starting a private redis-server", addr)
	return start(t, false).Addr
}

// Server is a private redis-server.
type Server struct {
	// Addr is host:port.
	Addr string

	t       testing.TB
	bin     string
	dir     string
	port    int
	persist bool
	conf    string   // a sentinel's configuration file; "" for a server
	extra   []string // further redis-server arguments

	mu   sync.Mutex
	cmd  *exec.Cmd     // nil while stopped
	done chan struct{} // closed when cmd has exited
	out  *bytes.Buffer
}

// Start runs a private redis-server for the rest of the test, persisted
// with an fsync-always append-only file so that it restarts with its data
// after Kill.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, persist bool) *Server {
	t.Helper()
	return startWith(t, persist, nil)
}

// startWith starts a server with further arguments, given the port the
// server listens on (extra may need more free ports of its own).
func startWith(t testing.TB, persist bool, extra func(port int) []string) *Server {
	t.Helper()
	return startServer(t, &Server{t: t, bin: Binary(t), dir: t.TempDir(), persist: persist}, extra)
}

// startServer starts s on a free port.
func startServer(t testing.TB, s *Server, extra func(port int) []string) *Server {
	t.Helper()
	var lastErr error
	for range 5 { // a free port can be taken between probing and binding
		s.port = freePort(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if extra != nil {
			s.extra = extra(s.port)
		}
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.stop)
			return s
		}
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return nil
}

// Binary returns the path of redis-server. Without it installed the test
// fails when $CI is "true" (CI must never skip Redis tests) and is skipped
// otherwise.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is not installed and CI=true: %v", err)
		}
		t.Skipf("redis-server is not installed: %v", err)
	}
	return bin
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var args []string
	if s.conf != "" {
		args = []string{s.conf, "--sentinel"}
	}
	args = append(args, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--daemonize", "no", "--appendonly", "no")
	if s.persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	}
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	s.out = new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	setPdeathsig(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if Ping(s.Addr, 200*time.Millisecond) == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server exited: %s", s.out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server did not answer on %s: %s", s.Addr, s.out)
		}
	}
}

// Kill stops the server abruptly (SIGKILL), as in a crash.
func (s *Server) Kill() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// running reports whether the server is up (not killed or stopped).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Restart starts a killed server again on the same port and data directory.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("restart redis-server: %v", err)
	}
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	<-s.done
	s.cmd = nil
}

// Ping reports whether a Redis answers PING at addr within timeout, with
// one dial and no retries.
func Ping(addr string, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		MaxRetries: -1, DialerRetries: 1, Protocol: 2, DisableIdentity: true,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

// UniquePrefix returns a new key prefix with a hash tag of its own, as a
// Redis Cluster requires (tenant/redisstore).
func UniquePrefix() string {
	return "warden:{test-" + rand.Text()[:12] + "}:"
}

// NewClient returns a client for addr with short timeouts, closed when the
// test ends.
func NewClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRetries: 1, DisableIdentity: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Prefix returns a key prefix unique to this test, with a hash tag, and
// deletes every key under it when the test ends.
func Prefix(t testing.TB, addr string) string {
	t.Helper()
	p := UniquePrefix()
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = redisstore.DeletePrefix(ctx, c, p) // the server may be gone: nothing to clean then
	})
	return p
}

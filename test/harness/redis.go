package harness

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/internal/redistest"
	"github.com/warden-ai/warden/tenant/redisstore"
)

// Redis is a private redis-server run by a test, for tests that kill and
// restart the tenant store. Its data lives in an append-only file fsynced
// on every write, in a directory of its own, so that a restart after Kill
// comes back with every tenant, key and limiter state, as a production
// Redis with persistence does. Unlike redistest.Server it is a Process of
// the Env, spawned, logged and stopped like the gateways and workers.
type Redis struct {
	*Process
	// Addr is its host:port on the loopback interface.
	Addr string
	// Dir holds its append-only file and its log.
	Dir string
}

// StartRedis starts a private redis-server on a free loopback port and
// waits until it answers; it is stopped when the test ends. Without
// redis-server installed the test fails when $CI is "true" and is skipped
// otherwise (redistest.Binary).
func (e *Env) StartRedis(t testing.TB) *Redis {
	t.Helper()
	bin := redistest.Binary(t)
	dir := t.TempDir()
	var last error
	for range 5 { // a probed free port can be taken before redis binds it
		ports := &freePorts{}
		addr := ports.take()
		ports.release()
		if ports.err != nil {
			t.Fatal(ports.err)
		}
		_, port, _ := net.SplitHostPort(addr)
		r := &Redis{Addr: addr, Dir: dir}
		r.Process = e.NewProcess("redis-"+port, filepath.Join(dir, "redis.log"),
			"--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "",
			"--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no")
		r.Bin = bin
		if last = r.start(); last == nil {
			t.Cleanup(func() { _ = r.Stop(StopGrace) })
			return r
		}
		_ = r.Kill()
	}
	t.Fatalf("harness: starting redis-server: %v", last)
	return nil
}

// Restart starts the server again (after Kill or Stop) on the same port
// and directory, and waits until it answers.
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	if err := r.start(); err != nil {
		t.Fatalf("harness: restarting redis-server: %v", err)
	}
}

// start runs the process and waits until it answers PING.
func (r *Redis) start() error {
	if err := r.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(WaitTimeout)
	for {
		err := redistest.Ping(r.Addr, time.Second)
		if err == nil {
			return nil
		}
		select {
		case <-r.Done():
			return fmt.Errorf("redis-server exited (%v): %s", r.ExitErr(), r.LogTail(10))
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server does not answer on %s after %v: %w", r.Addr, WaitTimeout, err)
		}
	}
}

// deleteKeys removes every key under prefix from the Redis at addr (a
// cluster's tenants in a shared Redis), ignoring a server that is gone.
func deleteKeys(addr, prefix string) {
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRetries: -1, DialerRetries: 1, Protocol: 2, DisableIdentity: true,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = redisstore.DeletePrefix(ctx, c, prefix)
}

package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the sentinel of StartSentinel monitors.
const SentinelMaster = "warden"

// Sentinel is a private Redis master with one replica, watched by one
// Redis Sentinel (quorum 1) that fails the master over once it has been
// unreachable for the down-after time; all stopped when the test ends.
type Sentinel struct {
	// Addr is the sentinel's host:port.
	Addr string
	// Master and Replica are the servers as started.
	Master, Replica *Server
}

// StartSentinel starts the master, its replica and the sentinel, and
// waits until the replica is in sync and the sentinel knows it. Like
// Start, it fails (CI=true) or skips without redis-server.
func StartSentinel(t testing.TB, downAfter time.Duration) *Sentinel {
	t.Helper()
	master := startWith(t, false, nil)
	host, port, _ := net.SplitHostPort(master.Addr)
	replica := startWith(t, false, func(int) []string { return []string{"--replicaof", host, port} })
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 1\nsentinel down-after-milliseconds %[1]s %[4]d\nsentinel failover-timeout %[1]s 10000\n",
		SentinelMaster, host, port, downAfter.Milliseconds())
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	sentinel := startServer(t, &Server{t: t, bin: Binary(t), dir: dir, conf: conf}, nil)
	s := &Sentinel{Addr: sentinel.Addr, Master: master, Replica: replica}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr, Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	sc := redis.NewClient(&redis.Options{Addr: sentinel.Addr, Protocol: 2, DisableIdentity: true})
	defer sc.Close()
	err := poll(ctx, "the replica to sync and the sentinel to know it", func() (bool, error) {
		repl, err := rc.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(repl, "master_link_status:up") {
			return false, err
		}
		info, err := sc.Info(ctx, "sentinel").Result()
		return err == nil && strings.Contains(info, "status=ok") && strings.Contains(info, "slaves=1"), err
	})
	if err != nil {
		t.Fatalf("redis sentinel: %v", err)
	}
	return s
}

// MasterAddr returns the master's address as the sentinel names it now.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(a[0], a[1]), nil
}

// WaitFailover waits until the sentinel names the replica as the master
// and the replica answers as one: Redis's own failover is over.
func (s *Sentinel) WaitFailover(ctx context.Context) error {
	rc := redis.NewClient(&redis.Options{Addr: s.Replica.Addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer rc.Close()
	return poll(ctx, "the sentinel to promote the replica", func() (bool, error) {
		addr, err := s.MasterAddr(ctx)
		if err != nil || addr != s.Replica.Addr {
			return false, err
		}
		repl, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(repl, "role:master"), err
	})
}

package storefailover

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/config"
)

// TestNewClientKinds: the configuration picks a cluster client seeded by
// every address, a Sentinel failover client, or a single-server client
// (addr alone, as before addrs existed); a password file that cannot be
// read is an error naming its field.
func TestNewClientKinds(t *testing.T) {
	for name, tc := range map[string]struct {
		r    config.Redis
		want string
	}{
		"single":   {config.Redis{Addr: "127.0.0.1:1"}, "*redis.Client 127.0.0.1:1"},
		"cluster":  {config.Redis{Addr: "ignored:1", Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Cluster: true}, "*redis.ClusterClient 127.0.0.1:1,127.0.0.1:2"},
		"seed":     {config.Redis{Addr: "127.0.0.1:3", Cluster: true}, "*redis.ClusterClient 127.0.0.1:3"},
		"sentinel": {config.Redis{Sentinel: config.Sentinel{MasterName: "m", Addrs: []string{"127.0.0.1:4"}}}, "*redis.Client FailoverClient"},
	} {
		c, err := NewClient(&tc.r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got string
		switch c := c.(type) {
		case *redis.ClusterClient:
			got = "*redis.ClusterClient " + strings.Join(c.Options().Addrs, ",")
		case *redis.Client:
			got = "*redis.Client " + c.Options().Addr
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", name, got, tc.want)
		}
		_ = c.Close()
	}
	_, err := NewClient(&config.Redis{Addr: "127.0.0.1:1", PasswordFile: "/nonexistent/pw"})
	if err == nil || !strings.Contains(err.Error(), "tenants.redis.password_file") {
		t.Errorf("unreadable password file: %v", err)
	}
}

// TestNodeFailure: connection errors and a reconfiguring cluster make
// the slot map reload; replies about the command do not.
func TestNodeFailure(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{fmt.Errorf("wrapped: %w", &net.OpError{Op: "read"}), true},
		{redis.Nil, false},
		{proto("CLUSTERDOWN The cluster is down"), true},
		{proto("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{proto("LOADING Redis is loading the dataset in memory"), true},
		{proto("ERR unknown command"), false},
		{proto("NOSCRIPT No matching script"), false},
	} {
		if got := nodeFailure(tc.err); got != tc.want {
			t.Errorf("nodeFailure(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// proto is a server reply error, as go-redis returns them.
type proto string

func (e proto) Error() string { return string(e) }
func (proto) RedisError()     {}

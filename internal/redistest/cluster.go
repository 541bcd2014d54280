package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// Cluster is a private Redis Cluster of three masters (no replicas), each
// a redis-server with cluster-enabled on free ports, stopped when the test
// ends. The slots are split evenly: a hash tag decides which master holds
// a key, as in production.
type Cluster struct {
	// Addrs are the masters' host:port, any of which seeds a client.
	Addrs []string
	bus   []int // the nodes' cluster bus ports
}

// StartCluster starts a three-master Redis Cluster for the rest of the
// test and waits until every node reports the cluster ok and agrees on
// the slot map. Like Start, it fails (CI=true) or skips without
// redis-server.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{}
	for range 3 {
		var bus int
		n := startWith(t, false, func(int) []string {
			// The cluster bus listens on a port of its own, picked free
			// too (the default, port+10000, may be taken or out of range).
			bus = freePort(t)
			return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "5000"}
		})
		c.Addrs = append(c.Addrs, n.Addr)
		c.bus = append(c.bus, bus)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.create(ctx); err != nil {
		t.Fatalf("redis cluster: %v", err)
	}
	return c
}

// create assigns each master a third of the slots, introduces them to one
// another (CLUSTER MEET) and waits until the cluster is ok everywhere.
func (c *Cluster) create(ctx context.Context) error {
	clients := make([]*redis.Client, len(c.Addrs))
	for i, addr := range c.Addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
		defer clients[i].Close()
	}
	per := clusterSlots / len(clients)
	for i, cl := range clients {
		lo, hi := i*per, (i+1)*per-1
		if i == len(clients)-1 {
			hi = clusterSlots - 1
		}
		if err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE %d %d: %w", c.Addrs[i], lo, hi, err)
		}
	}
	for i, addr := range c.Addrs[1:] {
		host, port, _ := strings.Cut(addr, ":")
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", host, port, c.bus[i+1]).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", addr, err)
		}
	}
	for i, cl := range clients {
		for {
			ok, err := c.settled(ctx, cl)
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s did not see the cluster settle: %v (last error %v)", c.Addrs[i], ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// settled reports whether the node behind cl knows every master, sees the
// cluster ok and maps every slot.
func (c *Cluster) settled(ctx context.Context, cl *redis.Client) (bool, error) {
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return false, err
	}
	want := []string{"cluster_state:ok", "cluster_slots_assigned:" + strconv.Itoa(clusterSlots),
		"cluster_known_nodes:" + strconv.Itoa(len(c.Addrs))}
	for _, w := range want {
		if !strings.Contains(info, w) {
			return false, nil
		}
	}
	slots, err := cl.ClusterSlots(ctx).Result()
	return err == nil && len(slots) == len(c.Addrs), err
}

// NewClient returns a cluster client seeded with every master, with short
// timeouts, closed when the test ends.
func (c *Cluster) NewClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.Addrs, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRetries: 1, DisableIdentity: true,
	})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// NodeNotHolding returns the address of a master that does not hold the
// hash slot of key: a client seeded with it reaches the key only by
// following the cluster's redirection, as a cluster client does.
func (c *Cluster) NodeNotHolding(t testing.TB, key string) string {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: c.Addrs[0], Protocol: 2, DisableIdentity: true})
	defer cl.Close()
	ctx := context.Background()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
	}
	ranges, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			for _, addr := range c.Addrs {
				if addr != r.Nodes[0].Addr {
					return addr
				}
			}
		}
	}
	t.Fatalf("no master found for slot %d in %+v", slot, ranges)
	return ""
}

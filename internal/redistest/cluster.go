package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// Cluster is a private Redis Cluster of three masters, each a
// redis-server with cluster-enabled on free ports, with replicas if asked
// for, stopped when the test ends. The slots are split evenly: a hash tag
// decides which master holds a key, as in production.
type Cluster struct {
	// Addrs are the masters' host:port, any of which seeds a client.
	Addrs []string
	// Replicas are the replicas' host:port, Replicas[i] replicating the
	// master first at Addrs[i] (ClusterConfig.Replicas).
	Replicas []string
	bus      []int // the nodes' cluster bus ports, masters then replicas
	nodes    map[string]*Server
	replicas bool
}

// ClusterConfig shapes a cluster for StartClusterWith.
type ClusterConfig struct {
	// Replicas gives each master one replica, which the cluster promotes
	// when its master fails.
	Replicas bool
	// NodeTimeout is cluster-node-timeout: how long a node may be
	// unreachable before it is failed over. Default 5s.
	NodeTimeout time.Duration
}

// StartCluster starts a three-master Redis Cluster for the rest of the
// test and waits until every node reports the cluster ok and agrees on
// the slot map. Like Start, it fails (CI=true) or skips without
// redis-server.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterConfig{})
}

// StartClusterWith starts a cluster shaped by cfg, as StartCluster does;
// with replicas it also waits until every replica is in sync with its
// master.
func StartClusterWith(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = 5 * time.Second
	}
	c := &Cluster{nodes: make(map[string]*Server), replicas: cfg.Replicas}
	n := 3
	if cfg.Replicas {
		n = 6
	}
	var addrs []string
	for range n {
		var bus int
		srv := startWith(t, false, func(int) []string {
			// The cluster bus listens on a port of its own, picked free
			// too (the default, port+10000, may be taken or out of range).
			bus = freePort(t)
			return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", strconv.FormatInt(cfg.NodeTimeout.Milliseconds(), 10)}
		})
		addrs = append(addrs, srv.Addr)
		c.nodes[srv.Addr] = srv
		c.bus = append(c.bus, bus)
	}
	c.Addrs, c.Replicas = addrs[:3], addrs[3:]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.create(ctx); err != nil {
		t.Fatalf("redis cluster: %v", err)
	}
	return c
}

// create assigns each master a third of the slots, introduces every node
// to the first (CLUSTER MEET), makes the replicas replicate their masters
// and waits until the cluster is ok everywhere.
func (c *Cluster) create(ctx context.Context) error {
	all := append(slices.Clone(c.Addrs), c.Replicas...)
	clients := make([]*redis.Client, len(all))
	for i, addr := range all {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
		defer clients[i].Close()
	}
	per := clusterSlots / len(c.Addrs)
	for i, cl := range clients[:len(c.Addrs)] {
		lo, hi := i*per, (i+1)*per-1
		if i == len(c.Addrs)-1 {
			hi = clusterSlots - 1
		}
		if err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE %d %d: %w", c.Addrs[i], lo, hi, err)
		}
	}
	for i, addr := range all[1:] {
		host, port, _ := strings.Cut(addr, ":")
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", host, port, c.bus[i+1]).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", addr, err)
		}
	}
	for i := range c.Replicas {
		master, replica := clients[i], clients[len(c.Addrs)+i]
		id, err := master.ClusterMyID(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER MYID: %w", c.Addrs[i], err)
		}
		// The replica must know the master before it can replicate it.
		if err := poll(ctx, c.Replicas[i]+" to learn its master", func() (bool, error) {
			err := replica.ClusterReplicate(ctx, id).Err()
			return err == nil, err
		}); err != nil {
			return err
		}
	}
	for i, cl := range clients {
		if err := poll(ctx, all[i]+" to see the cluster settle", func() (bool, error) { return c.settled(ctx, cl) }); err != nil {
			return err
		}
	}
	return nil
}

// poll calls cond every 50ms until it holds or ctx ends.
func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %v (last error %v)", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// settled reports whether the node behind cl knows every node, sees the
// cluster ok, maps every slot and, with replicas, sees each master with
// its replica and each replica's link to its master up.
func (c *Cluster) settled(ctx context.Context, cl *redis.Client) (bool, error) {
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return false, err
	}
	want := []string{"cluster_state:ok", "cluster_slots_assigned:" + strconv.Itoa(clusterSlots),
		"cluster_known_nodes:" + strconv.Itoa(len(c.Addrs)+len(c.Replicas))}
	for _, w := range want {
		if !strings.Contains(info, w) {
			return false, nil
		}
	}
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil || len(slots) != len(c.Addrs) {
		return false, err
	}
	if !c.replicas {
		return true, nil
	}
	for _, r := range slots {
		if len(r.Nodes) != 2 {
			return false, nil
		}
	}
	repl, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return false, err
	}
	if strings.Contains(repl, "role:slave") {
		return strings.Contains(repl, "master_link_status:up") && !strings.Contains(repl, "master_sync_in_progress:1"), nil
	}
	return strings.Contains(repl, "connected_slaves:1"), nil
}

// MasterOf returns the address of the master holding key's hash slot, as
// a live node answers now.
func (c *Cluster) MasterOf(ctx context.Context, key string) (string, error) {
	for addr, srv := range c.nodes {
		if !srv.running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
			DialTimeout: time.Second, ReadTimeout: time.Second})
		master, err := masterOf(ctx, cl, key)
		_ = cl.Close()
		if err == nil {
			return master, nil
		}
	}
	return "", fmt.Errorf("no live node maps %q", key)
}

// masterOf asks one node which master holds key's slot, and requires the
// cluster to be ok there.
func masterOf(ctx context.Context, cl *redis.Client, key string) (string, error) {
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return "", err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return "", fmt.Errorf("cluster state is not ok")
	}
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	ranges, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("slot %d is not mapped", slot)
}

// KillMasterOf SIGKILLs the master holding key's hash slot and returns
// its address.
func (c *Cluster) KillMasterOf(t testing.TB, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatalf("find the master of %q: %v", key, err)
	}
	c.nodes[addr].Kill()
	return addr
}

// WaitFailover waits until every live node maps key's slot to a master
// other than old and reports the cluster ok: Redis's own failover is over.
func (c *Cluster) WaitFailover(ctx context.Context, key, old string) (string, error) {
	var master string
	err := poll(ctx, "the cluster to fail "+old+" over", func() (bool, error) {
		master = ""
		for addr, srv := range c.nodes {
			if !srv.running() {
				continue
			}
			cl := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
				DialTimeout: time.Second, ReadTimeout: time.Second})
			m, err := masterOf(ctx, cl, key)
			_ = cl.Close()
			if err != nil || m == old || (master != "" && m != master) {
				return false, err
			}
			master = m
		}
		return master != "", nil
	})
	return master, err
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

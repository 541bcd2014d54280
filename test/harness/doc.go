// Package harness runs warden as real processes for black-box end-to-end
// tests: the `warden` binary built once per test binary, gateways and
// workers started from generated config files on free ports with real TLS
// (a dev PKI), and clients for them (the official OpenAI Go client, the
// admin API client, plain HTTPS).
//
// # Setup
//
// One Env per test binary, from TestMain:
//
//	var env *harness.Env
//
//	func TestMain(m *testing.M) {
//		var err error
//		if env, err = harness.Setup(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		if err := env.Close(); err != nil { // stops leftovers, checks for orphans
//			fmt.Fprintln(os.Stderr, err)
//			code = 1
//		}
//		os.Exit(code)
//	}
//
// Setup builds the binary (or uses $WARDEN_E2E_BIN), writes the dev PKI and
// two models: ModelTiny (the tiny preset of `warden model init`) and
// ModelEndless (a larger random model whose LM head can never pick EOS
// greedily, so a greedy request runs to max_tokens: use it when a test
// needs a request that is still generating when it acts).
//
// # Clusters
//
// Start runs a cluster and stops it when the test ends, printing the tail
// of every process's log if the test failed:
//
//	c := harness.Start(t, env, harness.Options{Workers: harness.PD(harness.ModelTiny)})
//	key := c.NewKey(t, "acme")
//	client := c.Gateway().OpenAI(key)
//
// Options choose the workers (roles, models, transfer backend, config
// edits), the number of gateways, a shared Redis tenant store, the models
// list and the heartbeat timeout; New writes the configs without starting
// anything. Workers get IDs "<role>-<model>-c<cluster>-<index>", a KV pool
// of DefaultKVBytes with pages poisoned on reserve, one compute thread and a
// metrics listener (Worker.MetricsURL).
//
// Env.StartRedis runs a private redis-server with persistence (Redis), for
// a test that kills and restarts the tenant store under a cluster
// (Options.RedisAddr). Options.RedisCluster keeps the tenants in a private
// three-master Redis Cluster instead (redistest.StartCluster).
//
// Every process can be killed (Kill, i.e. SIGKILL), stopped (Stop, SIGTERM),
// paused (Signal SIGSTOP/SIGCONT) and started again with the same config
// and ports (Start; Cluster.RestartWorker also waits until it is healthy).
// The Wait* methods poll the admin API (workers, pools, requests) or the
// API itself (WaitServing) until a condition holds, failing the test after
// WaitTimeout (a bound on hangs, not a timed assertion) or at once when a
// process of the cluster died that the test did not Stop or Kill.
//
// # References
//
// Reference runs the model in the test process (worker/runtime, greedy or
// seeded sampling) and tokenizes and detokenizes exactly as the gateway
// does, so a response's text and usage can be compared with what the
// engine computes on its own.
package harness

package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/constrain"
)

// grammarCache is the gateway's cache of compiled structured-output
// constraints (request decoding and tool constraints), exported to
// Prometheus.
type grammarCache struct {
	*constrain.Cache
}

func newGrammarCache(c config.GrammarCache) grammarCache {
	return grammarCache{constrain.NewCache(constrain.CacheLimits{Entries: c.Entries, Bytes: int64(c.MaxBytes)})}
}

var (
	grammarLookupsDesc = prometheus.NewDesc("warden_grammar_cache_lookups_total",
		"Structured-output constraints the gateway looked up in its grammar cache, by result: hit (compiled before) or miss (compiled now).",
		[]string{"result"}, nil)
	grammarEntriesDesc = prometheus.NewDesc("warden_grammar_cache_entries",
		"Compiled structured-output grammars in the gateway's cache.", nil, nil)
	grammarBytesDesc = prometheus.NewDesc("warden_grammar_cache_bytes",
		"Estimated memory of the compiled grammars in the gateway's cache.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c grammarCache) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

// Collect implements prometheus.Collector.
func (c grammarCache) Collect(ch chan<- prometheus.Metric) {
	s := c.Stats()
	ch <- prometheus.MustNewConstMetric(grammarLookupsDesc, prometheus.CounterValue, float64(s.Hits), "hit")
	ch <- prometheus.MustNewConstMetric(grammarLookupsDesc, prometheus.CounterValue, float64(s.Misses), "miss")
	ch <- prometheus.MustNewConstMetric(grammarEntriesDesc, prometheus.GaugeValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(grammarBytesDesc, prometheus.GaugeValue, float64(s.Bytes))
}

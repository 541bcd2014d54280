// Package gpu exports the GPUs' memory and utilisation as Prometheus
// metrics, read through NVML (github.com/NVIDIA/go-nvml) at scrape time:
//
//	warden_gpu_memory_bytes{device,kind}      kind = total, free, used
//	warden_gpu_utilization_ratio{device}      0..1, over NVML's last sample period
//	warden_gpu_info{device,uuid,name}         1
//
// device is the NVML device index. The collector reads NVML only in a
// binary built with cgo and the build tag cuda or nvml. Where NVML cannot
// be used — no NVIDIA driver (libnvidia-ml.so.1 missing), no GPU, or a
// binary built without those — New logs that once at INFO and the collector exports nothing; it
// never fails or panics.
package gpu

import (
	"errors"
	"log/slog"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// errNoNVML is why NVML is unavailable in a binary built without cgo or
// without the build tag cuda or nvml.
var errNoNVML = errors.New("built without NVML (cgo and -tags cuda or nvml)")

// reading is one device's state at scrape time. A field group whose
// query failed is left out (memOK, utilOK false).
type reading struct {
	index             int
	uuid, name        string
	total, free, used uint64
	memOK             bool
	util              float64 // 0..1
	utilOK            bool
}

// reader reads every device; close releases the library.
type reader interface {
	read() []reading
	close() error
}

// Collector is a prometheus.Collector of GPU metrics. Create it with New
// and Close it when the process stops serving metrics.
type Collector struct {
	r               *reader // nil: NVML unavailable
	mem, util, info *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// New opens NVML and returns the collector. When NVML is unavailable it
// logs why, once, at INFO and returns a collector that exports nothing.
func New(logger *slog.Logger) *Collector {
	r, err := openNVML()
	return newCollector(r, err, logger)
}

func newCollector(r reader, err error, logger *slog.Logger) *Collector {
	c := &Collector{
		mem: prometheus.NewDesc("warden_gpu_memory_bytes",
			"GPU memory by device (NVML index) and kind (total, free, used).", []string{"device", "kind"}, nil),
		util: prometheus.NewDesc("warden_gpu_utilization_ratio",
			"Fraction of NVML's last sample period in which a kernel ran on the GPU, by device.", []string{"device"}, nil),
		info: prometheus.NewDesc("warden_gpu_info",
			"GPU identity by device index: UUID and product name (always 1).", []string{"device", "uuid", "name"}, nil),
	}
	if err != nil {
		logger.Info("no NVML: GPU metrics are not exported", "reason", err.Error())
		return c
	}
	c.r = &r
	return c
}

// Available reports whether NVML was opened (the collector exports GPU
// metrics).
func (c *Collector) Available() bool { return c.r != nil }

// Describe implements prometheus.Collector. Without NVML it describes
// nothing, which registers the collector as unchecked: it then exports
// nothing and constrains nothing.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	if c.r == nil {
		return
	}
	ch <- c.mem
	ch <- c.util
	ch <- c.info
}

// Collect implements prometheus.Collector. A device query that fails
// leaves that device's sample out rather than failing the scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.r == nil {
		return
	}
	for _, d := range (*c.r).read() {
		dev := strconv.Itoa(d.index)
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, dev, d.uuid, d.name)
		if d.memOK {
			ch <- prometheus.MustNewConstMetric(c.mem, prometheus.GaugeValue, float64(d.total), dev, "total")
			ch <- prometheus.MustNewConstMetric(c.mem, prometheus.GaugeValue, float64(d.free), dev, "free")
			ch <- prometheus.MustNewConstMetric(c.mem, prometheus.GaugeValue, float64(d.used), dev, "used")
		}
		if d.utilOK {
			ch <- prometheus.MustNewConstMetric(c.util, prometheus.GaugeValue, d.util, dev)
		}
	}
}

// Close shuts NVML down (a no-op without it).
func (c *Collector) Close() error {
	if c.r == nil {
		return nil
	}
	return (*c.r).close()
}

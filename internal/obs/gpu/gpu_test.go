package gpu

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestNoNVMLHere: on a machine without an NVIDIA driver (this one, and any
// CI runner) New reports NVML unavailable, logs it once at INFO, and the
// collector registers and exports nothing without failing the scrape.
// On a machine with a driver it exports every GPU instead.
func TestNoNVMLHere(t *testing.T) {
	var logs bytes.Buffer
	c := New(slog.New(slog.NewJSONHandler(&logs, nil)))
	defer c.Close()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if c.Available() {
		t.Logf("NVML available: %d metric families", len(mfs))
		if len(mfs) != 3 || logs.Len() != 0 {
			t.Errorf("with NVML: %d families, logs %q", len(mfs), logs.String())
		}
		return
	}
	if len(mfs) != 0 {
		t.Errorf("without NVML the collector exported %d families", len(mfs))
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"level":"INFO"`) || !strings.Contains(lines[0], "no NVML") {
		t.Errorf("want one INFO line about NVML, got %q", logs.String())
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close without NVML: %v", err)
	}
}

// fakeReader serves fixed readings.
type fakeReader struct {
	readings []reading
	closed   bool
}

func (f *fakeReader) read() []reading { return f.readings }
func (f *fakeReader) close() error    { f.closed = true; return nil }

// TestCollectorExports: with readings, the metrics carry the documented
// names, labels and units; a device whose utilisation query failed has
// only its memory and identity.
func TestCollectorExports(t *testing.T) {
	f := &fakeReader{readings: []reading{
		{index: 0, uuid: "GPU-a", name: "NVIDIA H200", total: 150e9, free: 100e9, used: 50e9, memOK: true, util: 0.75, utilOK: true},
		{index: 1, uuid: "GPU-b", name: "NVIDIA H200", total: 150e9, free: 150e9, memOK: true},
	}}
	c := newCollector(f, nil, slog.New(slog.DiscardHandler))
	if !c.Available() {
		t.Fatal("collector with a reader is unavailable")
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetHelp() == "" || mf.GetType() != dto.MetricType_GAUGE {
			t.Errorf("%s: help %q, type %v", mf.GetName(), mf.GetHelp(), mf.GetType())
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got = append(got, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue()))
		}
	}
	want := []string{
		"warden_gpu_info{device=0,name=NVIDIA H200,uuid=GPU-a} 1",
		"warden_gpu_info{device=1,name=NVIDIA H200,uuid=GPU-b} 1",
		"warden_gpu_memory_bytes{device=0,kind=free} 1e+11",
		"warden_gpu_memory_bytes{device=0,kind=total} 1.5e+11",
		"warden_gpu_memory_bytes{device=0,kind=used} 5e+10",
		"warden_gpu_memory_bytes{device=1,kind=free} 1.5e+11",
		"warden_gpu_memory_bytes{device=1,kind=total} 1.5e+11",
		"warden_gpu_memory_bytes{device=1,kind=used} 0",
		"warden_gpu_utilization_ratio{device=0} 0.75",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("exported\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := c.Close(); err != nil || !f.closed {
		t.Errorf("Close: %v, reader closed %v", err, f.closed)
	}
}

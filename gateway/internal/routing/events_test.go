package routing

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/internal/controlpb"
)

func TestEventsFromProto(t *testing.T) {
	h1, h2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	ev, err := EventsFromProto(&controlpb.PrefixCacheReport{Sealed: [][]byte{h1}, Evicted: [][]byte{h2}, Snapshot: true})
	if err != nil || len(ev.Sealed) != 1 || ev.Sealed[0][0] != 1 || len(ev.Evicted) != 1 || ev.Evicted[0][31] != 2 || !ev.Snapshot {
		t.Fatalf("%+v, %v", ev, err)
	}
	if ev, err := EventsFromProto(nil); err != nil || len(ev.Sealed)+len(ev.Evicted) != 0 || ev.Snapshot {
		t.Fatalf("nil report: %+v, %v", ev, err)
	}
	for name, r := range map[string]*controlpb.PrefixCacheReport{
		"short hash":   {Sealed: [][]byte{h1[:31]}},
		"long hash":    {Evicted: [][]byte{append(h1, 0)}},
		"empty hash":   {Sealed: [][]byte{{}}},
		"too many":     {Sealed: make([][]byte, MaxReportHashes+1)},
		"too many sum": {Sealed: make([][]byte, MaxReportHashes), Evicted: [][]byte{h1}},
	} {
		if _, err := EventsFromProto(r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzEventsFromProto: a worker's report, as bytes off the wire, never
// panics the decoder, and what it accepts is 32-byte hashes within the
// bound.
func FuzzEventsFromProto(f *testing.F) {
	seed, _ := proto.Marshal(&controlpb.PrefixCacheReport{Sealed: [][]byte{bytes.Repeat([]byte{1}, 32)}, Snapshot: true})
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r controlpb.PrefixCacheReport
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		ev, err := EventsFromProto(&r)
		if err != nil {
			return
		}
		if len(ev.Sealed) != len(r.Sealed) || len(ev.Evicted) != len(r.Evicted) || len(ev.Sealed)+len(ev.Evicted) > MaxReportHashes {
			t.Fatalf("decoded %d+%d of %d+%d", len(ev.Sealed), len(ev.Evicted), len(r.Sealed), len(r.Evicted))
		}
		ix := NewIndex(8)
		ix.Apply("m", "w", ev)
		if ix.Len() > 8 {
			t.Fatalf("index of %d entries over its bound", ix.Len())
		}
	})
}

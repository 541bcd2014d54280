package kvtransfer

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

var zzTail, zzTotal, zzSleeps, zzEmpty, zzSlept, zzHashNs atomic.Int64

var zzMu sync.Mutex
var zzEv = map[string][]time.Duration{}
var zzT0 time.Time

func zzMark(name string) {
	zzMu.Lock()
	if name == "S1-open" {
		zzT0 = time.Now()
	}
	zzEv[name] = append(zzEv[name], time.Since(zzT0))
	zzMu.Unlock()
}

var zzNoEarly = os.Getenv("ZZ_NOEARLY") != ""
var zzVerifyChunk = func() int { n, _ := strconv.Atoi(os.Getenv("ZZ_VCHUNK")); if n == 0 { return 1 << 20 }; return n }()

var zzNoSendSpin = os.Getenv("ZZ_NOSENDSPIN") != ""

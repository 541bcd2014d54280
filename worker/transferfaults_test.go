package worker

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/internal/tlsutil"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/kvpool"
)

// isData matches DATA frames.
func isData(e *faults.Event) bool { return e.Frame != nil && e.Frame.Type == "DATA" }

// TestTransferFaultsFailTheRequest (I4): a transfer whose frame or page
// was corrupted, or whose frame carries an old epoch or another transfer's
// ID, fails the request on both workers with DataLoss — decode never
// becomes ready and sends no token — and the check is counted. Nothing
// stays reserved, and the next request (the fault fires once) gets its
// reference tokens.
func TestTransferFaultsFailTheRequest(t *testing.T) {
	p, sp := prompt(40, 21), greedy(8) // three pages
	want := runReference(t, [][]int32{p}, sp)[0]
	other := kvtransfer.NewTransferID()
	for _, c := range []struct {
		name    string
		backend config.TransferBackend
		rule    faults.Rule
		counted func(s pd) float64 // the counter the fault must move, by 1
	}{
		{"corrupted DATA frame", config.TransferTCP,
			faults.Rule{Point: faults.SendFrame, Action: faults.Corrupt, Match: isData},
			func(s pd) float64 {
				return metricValue(t, s.decode.Worker, "warden_transfer_checksum_failures_total")
			}},
		{"corrupted shm page", config.TransferSHM,
			faults.Rule{Point: faults.ShmPageDone, Action: faults.Corrupt, Match: func(e *faults.Event) bool { return e.Page == 1 }},
			func(s pd) float64 {
				return metricValue(t, s.decode.Worker, "warden_transfer_checksum_failures_total")
			}},
		{"DATA frame of an old epoch", config.TransferTCP,
			faults.Rule{Point: faults.SendFrame, Action: faults.Mutate, Match: isData, Edit: func(f *faults.Frame) { f.Epoch-- }},
			func(s pd) float64 { return metricValue(t, s.decode.Worker, "warden_transfer_stale_frames_total") }},
		{"DATA frame of another ticket", config.TransferTCP,
			faults.Rule{Point: faults.SendFrame, Action: faults.Mutate, Match: isData, Edit: func(f *faults.Frame) { f.TransferID = other }},
			func(s pd) float64 { return float64(s.decode.receiver.Stats().UnknownFrames) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			inj := faults.New(c.rule)
			s := pd{
				prefill: startWorker(t, testConfig(t, config.RolePrefill, c.backend, testPages), WithTransferFaults(inj)),
				decode:  startWorker(t, testConfig(t, config.RoleDecode, c.backend, testPages)),
			}
			r := s.run(t, nil, owner("acme", "faulty", 1), p, sp)
			if inj.Fired(0) != 1 {
				t.Fatalf("the fault fired %d times", inj.Fired(0))
			}
			if code(r.gen.err) != codes.DataLoss || r.gen.ready >= 0 || len(r.gen.tokens) > 0 {
				t.Errorf("Generate: ready %d, %d tokens, %v; want DataLoss before Ready", r.gen.ready, len(r.gen.tokens), r.gen.err)
			}
			// Prefill learns decode's verdict, or, when decode's teardown
			// aborted the transfer first, the abort.
			if c := code(r.prefillErr); c != codes.DataLoss && c != codes.Aborted {
				t.Errorf("Prefill: %v, want DataLoss or Aborted", r.prefillErr)
			}
			if v := c.counted(s); v != 1 {
				t.Errorf("fault counted %v times, want 1", v)
			}
			if st := s.decode.receiver.Stats(); st.Completed != 0 || st.Failed != 1 {
				t.Errorf("receiver stats %+v, want one failed transfer", st)
			}
			waitQuiet(t, s.prefill, s.decode)
			next := s.run(t, nil, owner("acme", "next", 1), p, sp)
			if next.prefillErr != nil {
				t.Fatal(next.prefillErr)
			}
			checkAgainst(t, "the request after the fault", next.gen, want)
			waitQuiet(t, s.prefill, s.decode)
		})
	}
}

// TestTransferPortRefusesUnauthenticated (I10) on a real decode worker: a
// connection without the cluster's TLS identity, or with it but without
// the ticket's token, is refused before it can write a byte; the reserved
// pages are untouched and the genuine prefill still delivers.
func TestTransferPortRefusesUnauthenticated(t *testing.T) {
	s := startPD(t, config.TransferTCP)
	p, sp := prompt(40, 22), greedy(8)
	want := runReference(t, [][]int32{p}, sp)[0]
	o := owner("acme", "target", 1)
	ctx := context.Background()
	res, err := s.decode.client.Reserve(ctx, &controlpb.ReserveRequest{Owner: o, PromptTokens: int64(len(p)), TotalTokens: int64(len(p)) + int64(sp.MaxTokens)})
	if err != nil {
		t.Fatal(err)
	}
	tk, err := ticketFrom(res.GetTicket())
	if err != nil {
		t.Fatal(err)
	}
	before := make([][]byte, len(tk.Pages))
	for i, pg := range tk.Pages {
		before[i] = bytes.Clone(s.decode.rt.Pool.Data(kvpool.PageID(pg)))
	}

	// The worker identity, but a forged token.
	workerTLS, err := tlsutil.ClusterClientConfig(pki.CACert, pki.WorkerCert, pki.WorkerKey, tlsutil.PeerWorker)
	if err != nil {
		t.Fatal(err)
	}
	forged := *tk
	forged.AuthToken = kvtransfer.NewAuthToken()
	if err := tryOpen(t, workerTLS, &forged); !errors.Is(err, kvtransfer.ErrUnauthenticated) {
		t.Errorf("Open with a forged token: %v, want ErrUnauthenticated", err)
	}
	if v := metricValue(t, s.decode.Worker, "warden_transfer_auth_failures_total"); v < 1 {
		t.Errorf("auth failures counted %v, want at least 1", v)
	}
	// The right token, but no client certificate; and the gateway's.
	for name, certs := range map[string][2]string{"no certificate": {}, "the gateway certificate": {pki.GatewayCert, pki.GatewayKey}} {
		tc, err := tlsutil.ClusterClientConfig(pki.CACert, certs[0], certs[1], tlsutil.PeerWorker)
		if err != nil {
			t.Fatal(err)
		}
		if err := tryOpen(t, tc, tk); err == nil {
			t.Errorf("Open with %s was accepted", name)
		}
	}
	// Plaintext: the TLS handshake fails, nothing is answered.
	conn, err := net.Dial("tcp", tk.Addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write(bytes.Repeat([]byte("WARDEN"), 1000))
	buf := make([]byte, 4096)
	n, _ := conn.Read(buf)
	conn.Close()
	if bytes.Contains(buf[:n], []byte("WARDEN")) {
		t.Errorf("plaintext peer got an echo")
	}

	for i, pg := range tk.Pages {
		if !bytes.Equal(s.decode.rt.Pool.Data(kvpool.PageID(pg)), before[i]) {
			t.Errorf("page %d changed under unauthenticated peers", pg)
		}
	}
	if st := s.decode.receiver.Stats(); st.Transfers != 0 || st.Bytes != 0 {
		t.Errorf("receiver stats %+v: an unauthenticated peer got a transfer", st)
	}
	var r pdRun
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.prefill, r.prefillErr = s.prefill.client.Prefill(ctx, &controlpb.PrefillRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket()})
	}()
	r.gen = generate(t, s.decode.client, &controlpb.GenerateRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket()})
	<-done
	if r.prefillErr != nil {
		t.Fatal(r.prefillErr)
	}
	checkAgainst(t, "the genuine transfer", r.gen, want)
	waitQuiet(t, s.prefill, s.decode)
}

// tryOpen opens a transfer stream for tk with client TLS tc, aborting it
// if it opened.
func tryOpen(t *testing.T, tc *tls.Config, tk *kvtransfer.Ticket) error {
	t.Helper()
	snd, err := kvtransfer.NewSender(kvtransfer.SenderConfig{TLS: tc, ShmDir: shmDir, MaxIdleConns: -1, HandshakeTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	st, err := snd.Open(context.Background(), tk)
	if err == nil {
		st.Abort()
	}
	return err
}

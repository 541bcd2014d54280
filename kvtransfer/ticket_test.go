package kvtransfer

import (
	"errors"
	"testing"
)

func validTicket() Ticket {
	return Ticket{
		TransferID: NewTransferID(), Owner: Owner{Tenant: "t", Request: "r", Epoch: 1},
		Pages: []int32{4, 5, 6, 9}, PageTokens: 16, PromptTokens: 40, PageBytes: 4096,
		AuthToken: NewAuthToken(), Addr: "127.0.0.1:1", Backend: TCP,
	}
}

func TestTicketValidate(t *testing.T) {
	good := validTicket()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if good.PromptPages() != 3 || good.PageSlots(0) != 16 || good.PageSlots(2) != 8 {
		t.Errorf("prompt pages %d, slots %d/%d", good.PromptPages(), good.PageSlots(0), good.PageSlots(2))
	}
	for name, edit := range map[string]func(*Ticket){
		"zero id":          func(t *Ticket) { t.TransferID = TransferID{} },
		"no request":       func(t *Ticket) { t.Owner.Request = "" },
		"short token":      func(t *Ticket) { t.AuthToken = t.AuthToken[:16] },
		"no page tokens":   func(t *Ticket) { t.PageTokens = 0 },
		"no prompt":        func(t *Ticket) { t.PromptTokens = 0 },
		"huge page":        func(t *Ticket) { t.PageBytes = MaxPageBytes + 1 },
		"backend":          func(t *Ticket) { t.Backend = "rdma" },
		"shm without path": func(t *Ticket) { t.Backend = SHM },
		"too few pages":    func(t *Ticket) { t.PromptTokens = 65 },
		"negative page":    func(t *Ticket) { t.Pages[1] = -1 },
		"duplicate page":   func(t *Ticket) { t.Pages[2] = 4 },
	} {
		tk := validTicket()
		tk.Pages = append([]int32(nil), tk.Pages...)
		edit(&tk)
		if err := tk.Validate(); !errors.Is(err, ErrInvalidTicket) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A duplicate among the pages reserved for generation only is fine:
	// the transfer never writes them.
	tk := validTicket()
	tk.Pages = []int32{1, 2, 3, 3}
	if err := tk.Validate(); err != nil {
		t.Errorf("duplicate beyond the prompt: %v", err)
	}
}

func TestTransferIDText(t *testing.T) {
	id := NewTransferID()
	got, err := ParseTransferID(id.String())
	if err != nil || got != id {
		t.Fatalf("%v %v", got, err)
	}
	for _, s := range []string{"", "zz", id.String()[:30]} {
		if _, err := ParseTransferID(s); !errors.Is(err, ErrInvalidTicket) {
			t.Errorf("%q: %v", s, err)
		}
	}
}

func TestErrorCodes(t *testing.T) {
	for i, e := range codes {
		if e == nil {
			continue
		}
		if errCode(e) != uint16(i) || codeErr(uint16(i)) != e {
			t.Errorf("code %d does not round-trip", i)
		}
	}
	if codeErr(999) != ErrProtocol {
		t.Error("unknown code")
	}
}

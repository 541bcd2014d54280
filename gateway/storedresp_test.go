package gateway

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/tenant"
)

// TestStoredResponsesEndToEnd: through a real gateway and worker, with the
// API client, a response continued by previous_response_id answers exactly
// what a chat of the whole conversation answers (its prompt starting with
// the first one's pages from the prefix cache); GET returns the stored
// response; another tenant's GET, DELETE and previous_response_id of it
// are 404s indistinguishable from a missing ID; a tenant deleted and
// created again under the same name finds nothing of its predecessor's;
// the owner's DELETE removes it.
func TestStoredResponsesEndToEnd(t *testing.T) {
	const maxTokens = 6
	tg := startGateway(t, testConfig())
	startReal(t, workerConfig(t, "both-1", config.RoleBoth, config.TransferTCP, tg.RegistryAddr().String())).attach(tg)
	ctx := t.Context()
	client := tg.api()
	ask := func(c apiClient, input, previous string) (*responseObject, error) {
		return c.createResponse(ctx, responseRequest{Model: "tiny", Input: input,
			MaxOutputTokens: new(int64(maxTokens)), Temperature: new(0.0), PreviousResponseID: previous})
	}
	question := strings.Repeat("What is the capital of the tiny kingdom, and why is it there? ", 4)
	first, err := ask(client, question, "")
	if err != nil {
		t.Fatal(err)
	}
	second, err := ask(client, "And how many people live there?", first.ID)
	if err != nil {
		t.Fatal(err)
	}
	ref := tg.greedyChat(tg.key, []chatMessage{
		userMessage(question),
		assistantMessage(first.outputText()),
		userMessage("And how many people live there?"),
	}, maxTokens)
	if second.outputText() != ref.Choices[0].Message.Content || second.Usage.InputTokens != ref.Usage.PromptTokens ||
		second.Usage.OutputTokens != ref.Usage.CompletionTokens {
		t.Fatalf("continued response %q (%d+%d tokens); the whole conversation as a chat answers %q (%d+%d)",
			second.outputText(), second.Usage.InputTokens, second.Usage.OutputTokens,
			ref.Choices[0].Message.Content, ref.Usage.PromptTokens, ref.Usage.CompletionTokens)
	}
	if second.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Errorf("the continued response's prompt repeats the first one's, but no prompt token came from the prefix cache")
	}
	if second.PreviousResponseID != first.ID || !strings.Contains(second.RawJSON(), `"store":true`) {
		t.Errorf("second response: previous_response_id %q, want %q, and stored: %s", second.PreviousResponseID, first.ID, second.RawJSON())
	}
	got, err := client.getResponse(ctx, second.ID)
	if err != nil || got.outputText() != second.outputText() || got.ID != second.ID || got.Usage.InputTokens != second.Usage.InputTokens {
		t.Fatalf("GET %s = %+v, %v", second.ID, got, err)
	}

	// Another tenant: the same answers as for an ID nobody has.
	if _, err := tg.Store().CreateTenant(ctx, tenant.Tenant{ID: "globex"}); err != nil {
		t.Fatal(err)
	}
	otherKey, _, err := tg.Store().IssueKey(ctx, "globex", "test")
	if err != nil {
		t.Fatal(err)
	}
	other := tg.apiAs(otherKey)
	missing := "resp_" + strings.Repeat("0", len(first.ID)-len("resp_"))
	for _, id := range []string{first.ID, missing} {
		_, getErr := other.getResponse(ctx, id)
		delErr := other.deleteResponse(ctx, id)
		_, askErr := ask(other, "Tell me what acme asked.", id)
		for what, err := range map[string]error{"GET": getErr, "DELETE": delErr, "previous_response_id": askErr} {
			var apiErr *apiError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
				t.Fatalf("globex's %s of %s: %v, want 404", what, id, err)
			}
			if msg := strings.ReplaceAll(apiErr.Message, id, "ID"); !strings.Contains(msg, `"ID" not found`) {
				t.Errorf("globex's %s of %s: message %q differs from a missing ID's", what, id, apiErr.Message)
			}
		}
	}
	if _, err := client.getResponse(ctx, first.ID); err != nil {
		t.Fatalf("acme's response is gone after globex's attempts: %v", err)
	}

	// The owner deletes one; a re-created tenant of the same name finds
	// nothing of the other.
	if err := client.deleteResponse(ctx, second.ID); err != nil {
		t.Fatalf("DELETE by the owner: %v", err)
	}
	if _, err := client.getResponse(ctx, second.ID); err == nil {
		t.Fatal("GET after DELETE succeeded")
	}
	if code, body := tg.admin(http.MethodDelete, "/admin/v1/tenants/acme"); code != http.StatusOK {
		t.Fatalf("DELETE tenant: %d %s", code, body)
	}
	if _, err := tg.Store().CreateTenant(ctx, tenant.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	newKey, _, err := tg.Store().IssueKey(ctx, "acme", "again")
	if err != nil {
		t.Fatal(err)
	}
	var apiErr *apiError
	if _, err := tg.apiAs(newKey).getResponse(ctx, first.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("the re-created tenant's GET of its predecessor's response: %v, want 404", err)
	}
}

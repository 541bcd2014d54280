package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
	"github.com/warden-ai/warden/worker/model"
)

var upAdmin = regexp.MustCompile(`(?m)^  admin URL  (\S+) \(token in (\S+)\)$`)

// TestAdaptersThroughUp (issue 32): `warden up` in P/D over tcp and over
// shm. Two tenants each register their own LoRA adapter of the served
// model with `warden admin adapter add`. Each tenant's chat under its
// adapter equals the reference engine's under that adapter (and differs
// from the base model's answer); each gets, for the other's adapter,
// exactly the 404 of a model that does not exist, and /v1/models lists
// its own adapter only.
func TestAdaptersThroughUp(t *testing.T) {
	ref := reference(t, harness.ModelTiny)
	m, err := model.LoadModelConfig(env.Models[harness.ModelTiny])
	if err != nil {
		t.Fatal(err)
	}
	msgs := []tokenizer.Message{{Role: "user", Content: "Tell me about adapters."}}
	base, err := ref.Chat(context.Background(), msgs, 12)
	if err != nil {
		t.Fatal(err)
	}
	type tenantAdapter struct {
		tenant, name string
		cfg, weights []byte
		want         harness.Output
	}
	var ads []*tenantAdapter
	for i, c := range []lora.Config{
		{Rank: 8, Alpha: 16, Targets: lora.Modules[:]},
		{Rank: 4, Alpha: 8, Targets: []lora.Module{lora.Q, lora.V, lora.Up}},
	} {
		cfg, w, err := lora.Random(&m, c, 0.12, uint64(40+i))
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.ChatUnder(context.Background(), cfg, w, msgs, 12)
		if err != nil {
			t.Fatal(err)
		}
		if want.Text == base.Text {
			t.Fatalf("adapter %d leaves the reference's answer unchanged: %q", i, want.Text)
		}
		ads = append(ads, &tenantAdapter{tenant: []string{"alpha", "beta"}[i], name: []string{"support", "legal"}[i], cfg: cfg, weights: w, want: want})
	}

	for _, transfer := range []string{"tcp", "shm"} {
		t.Run(transfer, func(t *testing.T) {
			_, info := launchUp(t, env.Bin, t.TempDir(), nil, "--transfer", transfer)
			am := upAdmin.FindStringSubmatch(info.log())
			if am == nil {
				t.Fatalf("warden up printed no admin URL:\n%s", info.log())
			}
			admin := func(args ...string) string {
				t.Helper()
				out, err := runWardenOut(append([]string{"admin", "--url", am[1], "--token-file", am[2], "--cacert", info.ca}, args...)...)
				if err != nil {
					t.Fatalf("warden admin %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return strings.TrimSpace(string(out))
			}
			keys := map[string]string{}
			for _, a := range ads {
				admin("tenants", "create", a.tenant)
				keys[a.tenant] = admin("keys", "issue", a.tenant)
				dir := t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), a.cfg, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), a.weights, 0o600); err != nil {
					t.Fatal(err)
				}
				admin("adapter", "add", dir, "--base", harness.ModelTiny, "--name", a.name, "--owner", a.tenant)
			}

			client := upClient(t, info)
			chat := func(key, model string) (int, []byte) {
				t.Helper()
				body, _ := json.Marshal(map[string]any{"model": model, "messages": wireMessages(msgs), "max_tokens": 12, "temperature": 0})
				req, err := http.NewRequest(http.MethodPost, info.baseURL+"/chat/completions", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode, b
			}
			for i, a := range ads {
				own := harness.ModelTiny + ":" + a.name
				status, body := chat(keys[a.tenant], own)
				var got struct {
					Model   string
					Choices []struct{ Message struct{ Content string } }
				}
				if err := json.Unmarshal(body, &got); status != http.StatusOK || err != nil || len(got.Choices) != 1 {
					t.Fatalf("%s's chat under %s: %d %s", a.tenant, own, status, body)
				}
				if got.Model != own || got.Choices[0].Message.Content != a.want.Text {
					t.Fatalf("%s's chat under %s: model %q, %q; want the reference under its adapter %q", a.tenant, own, got.Model, got.Choices[0].Message.Content, a.want.Text)
				}

				other := harness.ModelTiny + ":" + ads[1-i].name
				s1, foreign := chat(keys[a.tenant], other)
				s2, missing := chat(keys[a.tenant], harness.ModelTiny+":nothing")
				if s1 != http.StatusNotFound || s2 != http.StatusNotFound || string(foreign) != strings.ReplaceAll(string(missing), harness.ModelTiny+":nothing", other) {
					t.Fatalf("%s asking for %s's adapter: %d %s\nfor a missing one: %d %s\nwant the same 404", a.tenant, ads[1-i].tenant, s1, foreign, s2, missing)
				}

				req, _ := http.NewRequest(http.MethodGet, info.baseURL+"/models", nil)
				req.Header.Set("Authorization", "Bearer "+keys[a.tenant])
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var list struct{ Data []struct{ ID string } }
				err = json.NewDecoder(resp.Body).Decode(&list)
				resp.Body.Close()
				var ids []string
				for _, d := range list.Data {
					ids = append(ids, d.ID)
				}
				if err != nil || strings.Join(ids, ",") != harness.ModelTiny+","+own {
					t.Fatalf("%s's /v1/models: %v, %v; want %s and its adapter", a.tenant, ids, err, harness.ModelTiny)
				}
			}
		})
	}
}

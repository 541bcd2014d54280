package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/warden-ai/warden/worker/model"
)

// TestModelInitFamily writes a tiny model of each family through the
// command line and loads it back as the worker does.
func TestModelInitFamily(t *testing.T) {
	for _, fam := range model.FamilyNames() {
		dir := t.TempDir()
		var out, errOut bytes.Buffer
		args := []string{"model", "init", "--out", dir, "--preset", "tiny", "--family", fam, "--dtype", "bf16"}
		if code := Main(context.Background(), args, &out, &errOut); code != 0 {
			t.Fatalf("%s: exit %d: %s", fam, code, errOut.String())
		}
		m, err := model.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		arch := m.Config.Architectures[0]
		m.Close()
		if m.Config.ModelType != fam || !strings.Contains(out.String(), arch) {
			t.Errorf("%s: wrote model_type %q; output %q", fam, m.Config.ModelType, out.String())
		}
	}
	var errOut bytes.Buffer
	code := Main(context.Background(), []string{"model", "init", "--out", t.TempDir(), "--family", "gemma"}, &bytes.Buffer{}, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), `"gemma"`) {
		t.Errorf("--family gemma: exit %d, %q", code, errOut.String())
	}
}

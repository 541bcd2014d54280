package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/warden-ai/warden/worker/model"
)

func runModel(ctx context.Context, e *env, args []string) error {
	switch {
	case len(args) > 0 && args[0] == "init":
		return runModelInit(ctx, e, args[1:])
	case len(args) > 0 && args[0] == "export-gguf":
		return runModelExportGGUF(ctx, e, args[1:])
	}
	fmt.Fprintln(e.stderr, "usage: warden model init --out DIR --preset tiny|small [--family "+strings.Join(model.FamilyNames(), "|")+"] [--tokenizer-from DIR] [--seed N] [--dtype f32|bf16|f16]")
	fmt.Fprintln(e.stderr, "       warden model export-gguf --model-dir DIR --out FILE.gguf [--dtype f32|f16|bf16|q8_0|q4_k|q6_k]")
	return groupUsageResult(args)
}

// runModelExportGGUF writes a safetensors Llama model directory as a GGUF
// file llama.cpp and warden both load (model.ExportGGUF).
func runModelExportGGUF(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "model export-gguf", "model export-gguf --model-dir DIR --out FILE.gguf [--dtype f32|f16|bf16|q8_0|q4_k|q6_k]")
	dir := fs.String("model-dir", "", "safetensors model directory (config.json, weights, tokenizer.json)")
	out := fs.String("out", "", "GGUF file to write")
	dtype := fs.String("dtype", "f16", "tensor type of the matrices and embedding: f32, f16, bf16, q8_0, q4_k or q6_k (norms stay f32)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dir == "" || *out == "" {
		fmt.Fprintln(e.stderr, "warden model export-gguf: --model-dir and --out are required")
		fs.Usage()
		return errUsage
	}
	typ, err := model.ParseGGMLType(*dtype)
	if err != nil {
		return err
	}
	if err := model.ExportGGUF(*dir, *out, typ); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s (%s) from %s\n", *out, typ, *dir)
	return nil
}

func runModelInit(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "model init", "model init --out DIR --preset "+strings.Join(model.PresetNames(), "|")+
		" [--family "+strings.Join(model.FamilyNames(), "|")+"] [--tokenizer-from DIR] [--seed N] [--dtype f32|bf16|f16]")
	out := fs.String("out", "", "directory to write (created if missing)")
	preset := fs.String("preset", model.PresetTiny, "model preset: "+strings.Join(model.PresetNames(), ", "))
	family := fs.String("family", "llama", "architecture to shape the preset as: "+strings.Join(model.FamilyNames(), ", "))
	seed := fs.Uint64("seed", 1, "random seed of the weights")
	dtype := fs.String("dtype", "f32", "weight dtype: f32, bf16 or f16")
	tokFrom := fs.String("tokenizer-from", "", "directory of a real tokenizer (tokenizer.json, tokenizer_config.json) to use instead of the preset's; the vocabulary is sized to it")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		fmt.Fprintln(e.stderr, "warden model init: --out is required")
		fs.Usage()
		return errUsage
	}
	dt, err := parseDType(*dtype)
	if err != nil {
		return err
	}
	switch {
	case *tokFrom != "" && *family != "llama":
		return fmt.Errorf("--tokenizer-from shapes a llama model; it cannot be combined with --family %s", *family)
	case *tokFrom != "":
		err = model.InitWithTokenizer(*out, *preset, *tokFrom, *seed, dt)
	default:
		err = model.InitFamily(*out, *preset, *family, *seed, dt)
	}
	if err != nil {
		return err
	}
	cfg, err := model.LoadConfig(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s %s model (%s, %.1fM parameters, %s, seed %d) to %s\n",
		*preset, *family, cfg.Architectures[0], float64(cfg.NumParameters())/1e6, dt, *seed, *out)
	return nil
}

func parseDType(s string) (model.DType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32":
		return model.F32, nil
	case "bf16", "bfloat16":
		return model.BF16, nil
	case "f16", "float16":
		return model.F16, nil
	}
	return "", fmt.Errorf("unknown dtype %q (want f32, bf16 or f16)", s)
}

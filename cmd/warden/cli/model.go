package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/warden-ai/warden/worker/model"
)

func runModel(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "init" {
		fmt.Fprintln(e.stderr, "usage: warden model init --out DIR --preset tiny|small [--family "+strings.Join(model.FamilyNames(), "|")+"] [--tokenizer-from DIR] [--seed N] [--dtype f32|bf16|f16]")
		return errUsage
	}
	return runModelInit(ctx, e, args[1:])
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

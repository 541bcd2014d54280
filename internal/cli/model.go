package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/warden-ai/warden/worker/model"
)

func runModel(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "init" {
		fmt.Fprintln(e.stderr, "usage: warden model init --out DIR --preset tiny|small [--family "+strings.Join(model.FamilyNames(), "|")+"] [--seed N] [--dtype f32|bf16|f16]")
		return errUsage
	}
	return runModelInit(ctx, e, args[1:])
}

func runModelInit(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "model init", "model init --out DIR --preset "+strings.Join(model.PresetNames(), "|")+
		" [--family "+strings.Join(model.FamilyNames(), "|")+"] [--seed N] [--dtype f32|bf16|f16]")
	out := fs.String("out", "", "directory to write (created if missing)")
	preset := fs.String("preset", model.PresetTiny, "model preset: "+strings.Join(model.PresetNames(), ", "))
	family := fs.String("family", "llama", "architecture to shape the preset as: "+strings.Join(model.FamilyNames(), ", "))
	seed := fs.Uint64("seed", 1, "random seed of the weights")
	dtype := fs.String("dtype", "f32", "weight dtype: f32, bf16 or f16")
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
	cfg, err := model.FamilyPresetConfig(*preset, *family)
	if err != nil {
		return err
	}
	if err := model.InitFamily(*out, *preset, *family, *seed, dt); err != nil {
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

package cli

import (
	"context"
	"fmt"

	"github.com/warden-ai/warden/cmd/warden/bench"
)

// runBenchFleet compares cache-aware routing with round robin on a fleet
// of workers serving multi-turn conversations.
func runBenchFleet(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench fleet", "bench fleet [--prefill 2] [--decode 2] [--both 0] [--conversations 8] [--turns 8] [--turn-words 60] [--answer 8] [--threads 1]")
	o := bench.FleetOptions{}
	fs.IntVar(&o.Prefill, "prefill", 2, "prefill workers")
	fs.IntVar(&o.Decode, "decode", 2, "decode workers")
	fs.IntVar(&o.Both, "both", 0, "both workers (instead of prefill and decode workers when > 0)")
	fs.IntVar(&o.Conversations, "conversations", 8, "conversations run at once")
	fs.IntVar(&o.Turns, "turns", 8, "turns per conversation")
	fs.IntVar(&o.TurnWords, "turn-words", 60, "new user words per turn")
	fs.IntVar(&o.AnswerTokens, "answer", 8, "max_tokens of every turn")
	fs.IntVar(&o.Threads, "threads", 1, "compute threads per worker")
	if err := parse(fs, args); err != nil {
		return err
	}
	rep, err := bench.RunFleet(ctx, o)
	if err != nil {
		return err
	}
	shape := fmt.Sprintf("%d prefill × %d decode", o.Prefill, o.Decode)
	if o.Both > 0 {
		shape = fmt.Sprintf("%d both", o.Both)
	}
	fmt.Fprintf(e.stdout, "warden bench fleet — model tiny, %s workers, %d conversations × %d turns of ~%d words\n\n",
		shape, rep.Options.Conversations, rep.Options.Turns, rep.Options.TurnWords)
	rep.WriteTable(e.stdout)
	return nil
}

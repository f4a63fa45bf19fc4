package broker

import (
	"context"
	"errors"
	"fmt"

	"acpbroker/config"

	"github.com/rs/zerolog"
)

// Check asks the machine what a start needs of it, with the broker's
// environment: each profile's environment can be built (no broker
// secret in it), state.dir and each profile's cwd can be written, a
// worktree profile's repository and base are what git says they must
// be, what agents are shown keeps the broker's own files from them, and
// the sandbox runs. Each problem names its key; Open does not check.
func Check(ctx context.Context, cfg *config.Config, environ []string) error {
	if _, err := buildProfiles(cfg, environ, nil, nil, zerolog.Nop()); err != nil {
		return err
	}
	var problems []error
	if err := config.CheckWritable("state.dir", cfg.State.Dir); err != nil {
		problems = append(problems, err)
	}
	problems = append(problems, checkProfiles(ctx, cfg, gitConfiner(cfg))...)
	problems = append(problems, config.CheckSandbox(cfg)...)
	if err := sandboxFor(cfg).Check(sandboxCheckTimeout, cfg.Agent.RunAs); err != nil {
		problems = append(problems, fmt.Errorf("agent.sandbox = %q: %w", cfg.Agent.Sandbox, err))
	}
	return errors.Join(problems...)
}

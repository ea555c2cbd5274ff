package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// lockState is one node's lock as lock show prints it (and its --json
// form, one object a line).
type lockState struct {
	Path             string `json:"path"`
	Mode             string `json:"mode"` // exclusive, shared or free
	Holders          int32  `json:"holders"`
	LockGeneration   int64  `json:"lock_generation"`
	Waiters          int32  `json:"waiters"`
	DelayRemainingMs int64  `json:"delay_remaining_ms"`
}

func toLockState(p string, st *chubby.Stat) lockState {
	li := st.GetLock()
	l := lockState{Path: p, Mode: "free", LockGeneration: st.GetLockGeneration()}
	if li == nil {
		l.Mode = "unknown"
		return l
	}
	if li.IsSetMode() {
		l.Mode = strings.ToLower(li.GetMode().String())
	}
	l.Holders, l.Waiters, l.DelayRemainingMs = li.GetHolders(), li.GetWaiters(), li.GetDelayRemainingMs()
	return l
}

// lockCommandWithShow is the lock command with its show sub-command; main.go
// registers it. lock itself still takes PATH -- COMMAND: a PATH starts with
// "/", so it is never taken for "show".
func (a *app) lockCommandWithShow() *cobra.Command {
	lock := a.lockCommand()
	lock.AddCommand(a.lockShowCommand())
	return lock
}

func (a *app) lockShowCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show [--json] PATH",
		Short: "show who holds a lock: mode, holders, generation, waiters, lock-delay",
		Long: `show prints the lock state of the node at PATH, or, when PATH is a
directory, of the directory and every node in it, one line each:

  PATH  MODE  HOLDERS  GENERATION  WAITERS  DELAY

MODE is exclusive, shared or free; HOLDERS how many handles hold it (1 for
exclusive); GENERATION the lock generation, which counts how often the lock
went from free to held, so it also tells a holder's sequencer (chubby-seq:v1:
<E|S>:<generation>:...) from an older one; WAITERS how many Acquire calls
queue for it; DELAY how much lock-delay is left after a holder died holding
it (- when none): no one gets the lock before it runs out.

The cell does not say which sessions hold a lock. For an election file
(chubbyfs election campaign), the holder's address is the file's content:
chubbyfs election show PATH.

With --json, one JSON object a line: {"path", "mode", "holders",
"lock_generation", "waiters", "delay_remaining_ms"}.`,
		Example: `  chubbyfs lock show /locks/nightly
  chubbyfs lock show --json /locks`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "lock show", p, func(s *client.Session) error {
				locks, err := lockStates(ctx, s, p)
				if err != nil {
					return refused("lock show", p, err)
				}
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					for _, l := range locks {
						_ = enc.Encode(l)
					}
					return nil
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "PATH\tMODE\tHOLDERS\tGENERATION\tWAITERS\tDELAY")
				for _, l := range locks {
					delay := "-"
					if l.DelayRemainingMs > 0 {
						delay = (time.Duration(l.DelayRemainingMs) * time.Millisecond).String()
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", l.Path, l.Mode, l.Holders, l.LockGeneration, l.Waiters, delay)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a line instead of a table")
	return cmd
}

// lockStates returns the lock of p and, if p is a directory, of every node
// in it.
func lockStates(ctx context.Context, s *client.Session, p string) ([]lockState, error) {
	h, err := s.Open(ctx, p, client.OpenOptions{})
	if err != nil {
		return nil, err
	}
	defer h.Close(context.WithoutCancel(ctx))
	st, err := h.GetStat(ctx)
	if err != nil {
		return nil, err
	}
	locks := []lockState{toLockState(p, st)}
	if st.GetKind() != chubby.NodeKind_DIRECTORY {
		return locks, nil
	}
	entries, err := h.ReadDir(ctx)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		locks = append(locks, toLockState(path.Join(p, e.GetName()), e.GetStat()))
	}
	return locks, nil
}

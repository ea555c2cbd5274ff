package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/client/recipe"
	"github.com/chubbygo/chubby/gen/chubby"
)

// An election file is a file whose exclusive lock its leader holds and
// whose content is the leader's address (tools/examples/election). The
// commands here are recipe.Election's campaign, Leader and Observe. The
// address is current only while the lock is held: after the leader died,
// the file names it until the next leader writes.

func (a *app) electionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "election",
		Short: "elect a leader with a lock file, and show or follow who leads",
		Long: `An election file is a file whose exclusive lock the leader holds and whose
content is the leader's address. Candidates wait for the lock; the winner
writes its address; followers read it and learn of every new leader from a
contents-modified event. When a leader dies without releasing, the next
candidate leads after the leader's session lease and lock-delay run out.

  campaign  wait for leadership of PATH, write ADDR into it, run COMMAND
            while leading (like lock)
  show      print who leads PATH now (exit 1 if nobody does)
  follow    print each new leader of PATH as it is elected`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("election needs a sub-command: campaign, show or follow")
		},
	}
	cmd.AddCommand(a.electionCampaignCommand(), a.electionShowCommand(), a.electionFollowCommand())
	return cmd
}

// leaderState is election show's output (and its --json form).
type leaderState struct {
	Path           string `json:"path"`
	Leader         string `json:"leader,omitempty"` // the address, when the lock is held
	Last           string `json:"last,omitempty"`   // the address in the file when the lock is free
	LockGeneration int64  `json:"lock_generation"`
	Waiters        int32  `json:"candidates_waiting"`
	DelayRemaining int64  `json:"delay_remaining_ms,omitempty"`
}

func toLeaderState(p string, l recipe.LeaderInfo) leaderState {
	return leaderState{Path: p, Leader: string(l.Address), Last: string(l.Last), LockGeneration: l.LockGeneration,
		Waiters: l.Waiters, DelayRemaining: l.DelayRemaining.Milliseconds()}
}

func (l leaderState) text() string {
	var s string
	switch {
	case l.Leader != "":
		s = fmt.Sprintf("leader: %s (lock generation %d", l.Leader, l.LockGeneration)
	case l.Last != "":
		s = fmt.Sprintf("leader: none (the lock is free; the last leader was %s", l.Last)
	default:
		s = "leader: none (the lock is free"
	}
	if l.DelayRemaining > 0 {
		s += fmt.Sprintf(", in lock-delay for %v", time.Duration(l.DelayRemaining)*time.Millisecond)
	}
	return s + fmt.Sprintf(", %d waiting)", l.Waiters)
}

func (a *app) electionShowCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show [--json] PATH",
		Short: "print who leads the election file PATH",
		Long: `show prints the leader of the election file PATH: the address in the file,
if its exclusive lock is held, with the lock generation (the leader's term)
and how many candidates wait; exit 0. If the lock is free nobody leads: it
prints the last leader's address, if any, and exits 1.

With --json: {"path", "leader", "last", "lock_generation",
"candidates_waiting", "delay_remaining_ms"}.`,
		Example: `  chubbyfs election show /election/db
  addr=$(chubbyfs election show --json /election/db | jq -r .leader)`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "election show", p, func(s *client.Session) error {
				e, err := recipe.NewElection(s, p)
				if err != nil {
					return refused("election show", p, err)
				}
				info, err := e.Leader(ctx)
				if err != nil {
					return refused("election show", p, err)
				}
				l := toLeaderState(p, info)
				if asJSON {
					_ = json.NewEncoder(a.stdout).Encode(l)
				} else {
					fmt.Fprintln(a.stdout, l.text())
				}
				if l.Leader == "" {
					return &exitError{code: exitRefused}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object instead of text")
	return cmd
}

func (a *app) electionFollowCommand() *cobra.Command {
	var count int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "follow [--count N] [--json] PATH",
		Short: "print each new leader of the election file PATH",
		Long: `follow prints the current leader of the election file PATH (if any), then
one line for each new leader as its address is written, learnt from the
file's events (contents written, lock acquired); a dead leader's address
left in the file is not taken for the next leader's:

  leader ADDR generation=N

With --json each line is a JSON object instead, for scripts, shaped as
election show --json's: {"path", "leader", "lock_generation",
"candidates_waiting", "delay_remaining_ms"} (as the leader was found).

It runs until Ctrl-C (exit 0), until --count lines were printed (exit 0),
until PATH is deleted (exit 0) or until the session is lost (exit 1). The
global --timeout bounds only connecting and opening PATH.`,
		Example: `  chubbyfs election follow /election/db
  chubbyfs election follow --count 2 /election/db   # the leader now, and the next`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			if count < 0 {
				return usagef("election follow: --count must not be negative")
			}
			return a.follow(cmd.Context(), p, count, asJSON)
		},
	}
	cmd.Flags().IntVar(&count, "count", 0, "exit after this many lines (0: run until Ctrl-C)")
	jsonFlag(cmd, &asJSON, "one JSON object a line")
	return cmd
}

// follow prints the leader of p and every new one until ctx ends, a
// signal, count lines, or p is deleted.
func (a *app) follow(ctx context.Context, p string, count int, asJSON bool) error {
	return a.withLongSession(ctx, "election follow", p, func(ctx, setupCtx context.Context, s *client.Session) error {
		e, err := recipe.NewElection(s, p)
		if err != nil {
			return refused("election follow", p, err)
		}
		obs, err := e.Observe(setupCtx, recipe.ObserveOptions{})
		if err != nil {
			return refused("election follow", p, err)
		}
		fmt.Fprintf(a.stderr, "chubbyfs: following %s; Ctrl-C to stop\n", p)
		return a.printLeaders(ctx, s, obs, p, count, asJSON)
	})
}

// printLeaders prints each new leader obs reports until ctx ends, count
// lines, the file goes, or the session does.
func (a *app) printLeaders(ctx context.Context, s *client.Session, obs *recipe.LeaderObserver, p string, count int, asJSON bool) error {
	var last recipe.LeaderInfo
	for printed := 0; count == 0 || printed < count; {
		info, err := obs.Next(ctx)
		switch {
		case ctx.Err() != nil, errors.Is(err, recipe.ErrElectionGone):
			return nil
		case err != nil && s.Err() != nil:
			return sessionLost("election follow", p, s)
		case err != nil:
			return refused("election follow", p, err)
		}
		if !info.Leads() || last.Leads() && bytes.Equal(info.Address, last.Address) && info.LockGeneration == last.LockGeneration {
			continue
		}
		last = info
		if asJSON {
			if err := a.writeJSON(toLeaderState(p, info)); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(a.stdout, "leader %s generation=%d\n", info.Address, info.LockGeneration)
		}
		printed++
	}
	return nil
}

type campaignFlags struct {
	address   string
	wait      time.Duration
	lockDelay time.Duration
	lost      lostFlags
}

func (a *app) electionCampaignCommand() *cobra.Command {
	var f campaignFlags
	cmd := &cobra.Command{
		Use:   "campaign [--address ADDR] [--timeout D] [--lock-delay D] [--lost-signal SIG] [--lost-grace D] PATH -- COMMAND [ARG...]",
		Short: "wait for leadership, announce an address, run a command while leading",
		Long: `campaign opens the election file PATH (creating it if missing; its parent
directory must exist), waits for its exclusive lock, writes ADDR into it
and runs COMMAND while it leads, with the lock's sequencer in
CHUBBY_SEQUENCER (as lock does). Followers (election show, election
follow, tools/examples/election) learn ADDR from the file.

When COMMAND ends, campaign empties the file, releases the lock (the next
candidate leads at once) and exits with COMMAND's status. If campaign dies
instead, the next candidate leads after its session lease and --lock-delay.
--timeout bounds the wait for leadership (exit 1 when it passes).

When the lock is lost, COMMAND must stop leading: another may lead soon.
` + lostHelp,
		Example: `  chubbyfs election campaign --address 10.0.0.7:5432 /election/db -- ./serve-db.sh`,
		Args:    anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, argv, err := lockArgs(cmd, "election campaign", args, f.wait, f.lockDelay)
			if err != nil {
				return err
			}
			lost, err := f.lost.policy("election campaign")
			if err != nil {
				return err
			}
			if f.address == "" {
				host, err := os.Hostname()
				if err != nil {
					return usagef("election campaign: no --address and no host name: %v", err)
				}
				f.address = host
			}
			return a.campaign(cmd.Context(), p, f, lost, argv)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVar(&f.address, "address", "", "the address to announce while leading (default: the host name)")
	cmd.Flags().DurationVar(&f.wait, "timeout", 0, "give up waiting for leadership after this long (default 0: wait as long as it takes)")
	cmd.Flags().DurationVar(&f.lockDelay, "lock-delay", time.Duration(chubby.DEFAULT_LOCK_DELAY_MS)*time.Millisecond,
		"if this session dies leading, keep the next leader out this long (0: none; at most 60s)")
	addLostFlags(cmd, &f.lost)
	return cmd
}

// campaign waits for leadership of p (recipe.Election), announces
// f.address, runs argv while leading, then resigns.
func (a *app) campaign(ctx context.Context, p string, f campaignFlags, lost lostPolicy, argv []string) error {
	return a.runLocked(ctx, p, lockedRun{
		verb: "election campaign", waitingFor: "leadership", notWon: "not elected", wait: f.wait, lost: lost,
		take: func(_, waitCtx context.Context, s *client.Session) (*chubby.Sequencer, func(context.Context) error, error) {
			e, err := recipe.NewElection(s, p)
			if err != nil {
				return nil, nil, err
			}
			l, err := e.Campaign(waitCtx, []byte(f.address), recipe.CampaignOptions{Wait: f.wait, LockDelay: lockOptions(f.lockDelay).LockDelay})
			if err != nil {
				return nil, nil, err
			}
			fmt.Fprintf(a.stderr, "chubbyfs: leading %s as %s (lock generation %d)\n", p, f.address, l.LockGeneration())
			return l.Sequencer(), l.Resign, nil
		},
	}, argv)
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// membersJSON is members --json's output: the cell's configuration as its
// master reports it (GetStatus), with roles as names as in status --json.
type membersJSON struct {
	Cell          string       `json:"cell"`
	MasterID      string       `json:"master_id"`
	MasterAddress string       `json:"master_address"`
	Epoch         int64        `json:"epoch"`
	ConfigEpoch   int64        `json:"config_epoch"`
	PendingConfig int64        `json:"pending_config"` // 0: no change pending
	TargetSize    int32        `json:"target_size"`
	Members       []memberJSON `json:"members"`
	Decisions     []string     `json:"decisions"` // newest last
}

type memberJSON struct {
	ID          string `json:"id"`
	Address     string `json:"address"` // for clients
	PeerAddress string `json:"peer_address"`
	Membership  string `json:"membership"`   // voter, learner, spare ("" if the cell does not say)
	Role        string `json:"role"`         // MASTER, REPLICA, RECOVERING, UNREACHABLE
	GossipState string `json:"gossip_state"` // alive, suspect, dead, left ("" without gossip)
	// Behind and LastContactMs are null when the master does not report
	// them (a spare, or a status from a replica that is not the master);
	// LastContactMs is -1 when the master has not heard from the replica
	// in its current view.
	Behind        *int64 `json:"behind"`
	LastContactMs *int64 `json:"last_contact_ms"`
	CommittedOp   int64  `json:"committed_op"`
}

func toMembersJSON(st *chubby.CellStatus) membersJSON {
	out := membersJSON{
		Cell: st.GetCell(), MasterID: st.GetMasterId(), MasterAddress: st.GetMasterAddress(), Epoch: st.GetEpoch(),
		ConfigEpoch: st.GetConfigEpoch(), PendingConfig: st.GetPendingConfig(), TargetSize: st.GetTargetSize(),
		Members: []memberJSON{}, Decisions: append([]string{}, st.GetDecisions()...),
	}
	for _, r := range st.GetReplicas() {
		out.Members = append(out.Members, memberJSON{
			ID: r.GetId(), Address: r.GetAddress(), PeerAddress: r.GetPeerAddress(), Membership: r.GetMembership(),
			Role: r.GetRole().String(), GossipState: r.GetGossipState(),
			Behind: r.Behind, LastContactMs: r.LastContactMs, CommittedOp: r.GetCommittedOp(),
		})
	}
	return out
}

// tableDecisions is how many of the master's recent decisions members
// prints in table form (--json prints all it has).
const tableDecisions = 5

// printMembers is members' table form.
func printMembers(w io.Writer, st *chubby.CellStatus) {
	pending := "none"
	if p := st.GetPendingConfig(); p != 0 {
		pending = fmt.Sprintf("at log index %d", p)
	}
	fmt.Fprintf(w, "cell:           %s\n", st.GetCell())
	fmt.Fprintf(w, "master:         %s\n", masterText(st))
	fmt.Fprintf(w, "configuration:  epoch %d, pending change %s, target size %d\n",
		st.GetConfigEpoch(), pending, st.GetTargetSize())
	fmt.Fprintln(w, "members:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tCLIENT ADDRESS\tPEER ADDRESS\tMEMBERSHIP\tROLE\tGOSSIP\tBEHIND\tLAST CONTACT")
	for _, r := range st.GetReplicas() {
		behind := "-"
		if r.IsSetBehind() {
			behind = strconv.FormatInt(r.GetBehind(), 10)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.GetId(), orDash(r.GetAddress()), orDash(r.GetPeerAddress()),
			orDash(r.GetMembership()), r.GetRole().String(), orDash(r.GetGossipState()), behind, lastContact(r))
	}
	tw.Flush()
	ds := st.GetDecisions()
	if len(ds) == 0 {
		fmt.Fprintln(w, "decisions:      none")
		return
	}
	shown := ds[max(0, len(ds)-tableDecisions):]
	fmt.Fprintf(w, "decisions (the last %d of %d, newest last; --json for all):\n", len(shown), len(ds))
	for _, d := range shown {
		fmt.Fprintf(w, "  %s\n", d)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// lastContact is a member's LAST CONTACT cell: how long ago the master
// heard from it, "never" when it has not in its view, "-" when it does
// not say.
func lastContact(r *chubby.ReplicaStatus) string {
	switch {
	case !r.IsSetLastContactMs():
		return "-"
	case r.GetLastContactMs() < 0:
		return "never"
	}
	return (time.Duration(r.GetLastContactMs()) * time.Millisecond).String() + " ago"
}

func (a *app) membersCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "members [--json]",
		Short: "show the cell's configuration: its voters, learners and spares",
		Long: `members shows the cell's membership as its master reports it (it finds
the master first): one line per replica,

  ID  CLIENT ADDRESS  PEER ADDRESS  MEMBERSHIP  ROLE  GOSSIP  BEHIND  LAST CONTACT

CLIENT ADDRESS is where clients reach it, PEER ADDRESS where the other
replicas do; MEMBERSHIP is voter, learner (in the configuration, voting in
nothing yet) or spare (found by gossip alive or suspect, not in the
configuration; a spare gossip has dead or left is not listed); ROLE is
MASTER, REPLICA or RECOVERING; GOSSIP is what memberlist says of it (alive,
suspect, dead, left; - without gossip); BEHIND how many entries the
master has committed that it has not acknowledged, and LAST CONTACT how
long ago the master last heard from it (never: not in the master's
current view; - when not reported, as for spares). Above the table: the
configuration's epoch, a change not yet committed (its log index) and the
size the master grows the cell to; below it the master's last few
membership decisions.

With --json it prints the same as one JSON object, for scripts:
{"cell", "master_id", "master_address", "epoch", "config_epoch",
"pending_config" (0: none), "target_size", "members": [{"id", "address",
"peer_address", "membership", "role", "gossip_state", "behind",
"last_contact_ms", "committed_op"}], "decisions" (all the master keeps,
newest last)}; behind and last_contact_ms are null when not reported,
last_contact_ms -1 for never. It needs no session.`,
		Example: `  chubbyfs members
  chubbyfs members --json
  chubbyfs members remove 3     # take replica 3 out of the configuration`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usagef("members takes no arguments (sub-command: remove ID), got %q", args)
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			c, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			// The master's status: only it knows how far behind each
			// member is and when it last heard from it. GetMaster makes
			// it the client's guess, where Status goes.
			if _, err := c.GetMaster(ctx); err != nil {
				return refused("members", "", err)
			}
			st, err := c.Status(ctx)
			if err != nil {
				return refused("members", "", err)
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(toMembersJSON(st))
			}
			printMembers(a.stdout, st)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text (default: text)")
	cmd.AddCommand(a.membersRemoveCommand())
	return cmd
}

func (a *app) membersRemoveCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "remove [--json] ID",
		Short: "take a replica out of the cell's configuration",
		Long: `remove asks the master to take the replica ID (as members shows it) out
of the cell's configuration, and prints the log index of the configuration
change once it has committed. It is the operator's forced removal, for a
replica that is gone for good: the master never removes a live voter by
itself. A voter is removed in a change of its own. A replica removed that
still runs takes no part in the cell any more. It needs no session.

Exit status: 0 the change committed: the replica is out. 1 refused,
nothing changed: the last voter, an ID not in the configuration ("not
found"), another change in progress or this one lost in a view change
("unavailable": retry shortly; the message says so when another change
took the replica out meanwhile without retiring it, so that the autopilot
may take it back should it start again), no master. 3 outcome unknown: the change
was proposed but is not known committed (the master was cut off from the
others, or the answer was lost); it may still take effect: check with
chubbyfs members.

With --json, a removal that committed prints one JSON object instead, for
scripts: {"id", "log_index"}; failures are reported on standard error as
without it.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("members remove wants exactly one ID, got %d arguments", len(args))
			}
			id := args[0]
			if n, err := strconv.ParseUint(id, 10, 64); err != nil || n == 0 {
				return usagef("members remove: ID must be a replica id (a positive number, as members shows it), got %q", id)
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			c, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			index, err := c.RemoveMember(ctx, id)
			if err != nil {
				return removeFailed(id, err)
			}
			if asJSON {
				return a.writeJSON(removeJSON{ID: id, LogIndex: index})
			}
			fmt.Fprintf(a.stdout, "removed replica %s: configuration change at log index %d committed\n", id, index)
			return nil
		},
	}
	jsonFlag(cmd, &asJSON, "one JSON object")
	return cmd
}

// removeJSON is members remove --json's output: the committed change.
type removeJSON struct {
	ID       string `json:"id"`
	LogIndex int64  `json:"log_index"`
}

// outcomeUnknownPrefix starts the message of the cell's answer to a
// RemoveMember proposed but not known committed (idl/chubby.thrift).
const outcomeUnknownPrefix = "outcome unknown: "

// removeFailed is members remove's error for a failed RemoveMember: exit
// 3 when the removal may still take effect, 1 when it was refused.
func removeFailed(id string, err error) error {
	if !changeMayHaveHappened(err) {
		return refused("members remove", id, err)
	}
	msg := "members remove " + id + ": " + client.Describe(err)
	if !strings.Contains(msg, outcomeUnknownPrefix) {
		msg += " (" + strings.TrimSuffix(outcomeUnknownPrefix, ": ") + ": the removal may still take effect; check with chubbyfs members)"
	}
	return &exitError{code: exitUnknown, msg: msg}
}

// changeMayHaveHappened reports whether a failed call that changes the
// cell may still have taken effect: the cell said so (UNAVAILABLE
// "outcome unknown: …"), or the request may have reached it and its
// answer was not had (a timeout, a lost connection). A refusal of the
// cell, and a cell that could not be reached at all, changed nothing.
func changeMayHaveHappened(err error) bool {
	var ce *chubby.ChubbyError
	switch {
	case errors.As(err, &ce):
		return ce.Code == chubby.ErrorCode_UNAVAILABLE && strings.HasPrefix(ce.Message, outcomeUnknownPrefix)
	case errors.Is(err, client.ErrUnreachable), errors.Is(err, client.ErrClientClosed):
		return false
	}
	return true
}

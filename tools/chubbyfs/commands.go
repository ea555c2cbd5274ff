package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

func (a *app) lsCommand() *cobra.Command {
	var long, asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [-l] [--json] [PATH]",
		Short: "list a directory (default /)",
		Long: `ls lists the children of the directory PATH (default /), one name a line,
sorted. For a file it prints the file's name.

With -l, each line shows: kind (d directory, - file) and e for ephemeral,
size (bytes; for a directory, its number of children), content generation,
lock state (- free, E exclusive, S<n> shared by n holders, +<n>w waiting,
delay while in lock-delay), modification time (UTC) and name.

With --json it prints one JSON array, for scripts, an object per child
(sorted by name): {"name", and the fields of stat --json: "path", "kind",
"instance", "content_generation", ..., "lock": {...}}; -l changes nothing.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{"/"}
			}
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "ls", p, func(s *client.Session) error {
				h, err := s.Open(ctx, p, client.OpenOptions{})
				if err != nil {
					return refused("ls", p, err)
				}
				var entries []*chubby.DirEntry
				if st := h.Stat(); st.GetKind() == chubby.NodeKind_FILE {
					entries = []*chubby.DirEntry{{Name: path.Base(p), Stat: st}}
				} else if entries, err = h.ReadDir(ctx); err != nil {
					return refused("ls", p, err)
				}
				if asJSON {
					out := []lsEntryJSON{}
					for _, e := range entries {
						out = append(out, lsEntryJSON{Name: e.GetName(), statJSON: toStatJSON(entryPath(p, e), e.GetStat())})
					}
					return a.writeJSON(out)
				}
				if !long {
					for _, e := range entries {
						fmt.Fprintln(a.stdout, e.GetName())
					}
					return nil
				}
				for _, e := range entries {
					st := e.GetStat()
					fmt.Fprintf(a.stdout, "%s %7d %6d %-7s %s %s\n", kindFlags(st), st.GetSize(),
						st.GetContentGeneration(), lockSummary(st.GetLock()), msTime(st.GetModifyTimeMs()), e.GetName())
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVarP(&long, "long", "l", false, "long form: kind, size, generation, lock, time, name (default: names only)")
	jsonFlag(cmd, &asJSON, "one JSON array")
	return cmd
}

// entryPath is the path of e, listed by ls of p: the path its Stat names
// (the cell fills it in), else p's child.
func entryPath(p string, e *chubby.DirEntry) string {
	if sp := e.GetStat().GetPath(); sp != "" {
		return sp
	}
	return path.Join(p, e.GetName())
}

func kindFlags(st *chubby.Stat) string {
	k := "-"
	if st.GetKind() == chubby.NodeKind_DIRECTORY {
		k = "d"
	}
	if st.GetEphemeral() {
		return k + "e"
	}
	return k + "-"
}

// lockSummary is the short lock state ls -l shows.
func lockSummary(li *chubby.LockInfo) string {
	if li == nil {
		return "-"
	}
	var s string
	switch {
	case !li.IsSetMode():
		s = "-"
	case li.GetMode() == chubby.LockMode_EXCLUSIVE:
		s = "E"
	default:
		s = "S" + strconv.Itoa(int(li.GetHolders()))
	}
	if li.GetWaiters() > 0 {
		s += "+" + strconv.Itoa(int(li.GetWaiters())) + "w"
	}
	if li.GetDelayRemainingMs() > 0 {
		s += ",delay"
	}
	return s
}

// lockLong is the lock state stat shows.
func lockLong(li *chubby.LockInfo) string {
	if li == nil {
		return "unknown"
	}
	var s string
	switch {
	case !li.IsSetMode():
		s = "free"
	case li.GetMode() == chubby.LockMode_EXCLUSIVE:
		s = "held exclusive"
	default:
		s = fmt.Sprintf("held shared by %d", li.GetHolders())
	}
	if li.GetWaiters() > 0 {
		s += fmt.Sprintf(", %d waiting", li.GetWaiters())
	}
	if d := li.GetDelayRemainingMs(); d > 0 {
		s += fmt.Sprintf(", in lock-delay for %v", time.Duration(d)*time.Millisecond)
	}
	return s
}

func msTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func (a *app) statCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stat [--json] PATH",
		Short: "show a node's metadata",
		Long: `stat prints the metadata of the node at PATH, a "field: value" line each:
kind, instance (differs for a re-created node), content and lock
generations, checksum, size, times, ephemeral owner and lock state.

With --json it prints the same as one JSON object, for scripts:
` + statJSONHelp + `.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "stat", p, func(s *client.Session) error {
				h, err := s.Open(ctx, p, client.OpenOptions{})
				if err != nil {
					return refused("stat", p, err)
				}
				st, err := h.GetStat(ctx)
				if err != nil {
					return refused("stat", p, err)
				}
				if asJSON {
					return a.writeJSON(toStatJSON(p, st))
				}
				printStat(a.stdout, st)
				return nil
			})
		},
	}
	jsonFlag(cmd, &asJSON, "one JSON object")
	return cmd
}

func printStat(w io.Writer, st *chubby.Stat) {
	kind := "file"
	if st.GetKind() == chubby.NodeKind_DIRECTORY {
		kind = "directory"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "path:\t%s\n", st.GetPath())
	fmt.Fprintf(tw, "kind:\t%s\n", kind)
	fmt.Fprintf(tw, "instance:\t%d\n", st.GetInstance())
	fmt.Fprintf(tw, "content_generation:\t%d\n", st.GetContentGeneration())
	fmt.Fprintf(tw, "lock_generation:\t%d\n", st.GetLockGeneration())
	fmt.Fprintf(tw, "acl_generation:\t%d\n", st.GetAclGeneration())
	fmt.Fprintf(tw, "checksum:\t%08x\n", uint32(st.GetChecksum()))
	fmt.Fprintf(tw, "size:\t%d\n", st.GetSize())
	fmt.Fprintf(tw, "created:\t%s\n", msTime(st.GetCreateTimeMs()))
	fmt.Fprintf(tw, "modified:\t%s\n", msTime(st.GetModifyTimeMs()))
	fmt.Fprintf(tw, "ephemeral:\t%t\n", st.GetEphemeral())
	fmt.Fprintf(tw, "ephemeral_owner:\t%d\n", st.GetEphemeralOwner())
	fmt.Fprintf(tw, "lock:\t%s\n", lockLong(st.GetLock()))
	tw.Flush()
}

func (a *app) catCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cat [--json] PATH",
		Short: "print a file's content",
		Long: `cat writes the content of the file at PATH to standard output, as is.

With --json it prints one JSON object instead, for scripts: {"path",
"content_generation", "size" (bytes), "utf8", "data"}. Content is bytes:
when they are valid UTF-8, utf8 is true and data is the content as a
string; otherwise utf8 is false and data is the content in standard
base64 (RFC 4648, with padding).`,
		Example: `  chubbyfs cat /config/app/settings
  chubbyfs cat --json /config/app/settings | jq -r 'select(.utf8) | .data'`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "cat", p, func(s *client.Session) error {
				h, err := s.Open(ctx, p, client.OpenOptions{})
				if err != nil {
					return refused("cat", p, err)
				}
				data, st, err := h.GetContentsAndStat(ctx)
				if err != nil {
					return refused("cat", p, err)
				}
				if asJSON {
					return a.writeJSON(toCatJSON(p, data, st))
				}
				if _, err := a.stdout.Write(data); err != nil {
					return refused("cat", p, fmt.Errorf("writing output: %w", err))
				}
				return nil
			})
		},
	}
	jsonFlag(cmd, &asJSON, "one JSON object (content as UTF-8 text or base64)")
	return cmd
}

func (a *app) writeCommand() *cobra.Command {
	var ifGen int64
	cmd := &cobra.Command{
		Use:   "write [--if-generation N] PATH [DATA]",
		Short: "write a file's content (DATA, or standard input)",
		Long: `write replaces the content of the file at PATH with DATA, or with standard
input when DATA is absent, creating the file if it is missing (its parent
directory must exist). Content is at most 256 KiB.

With --if-generation N the write is a compare-and-swap: it succeeds only if
the file exists and its content generation (see stat) is still N, and fails
with "generation mismatch" (exit 1) otherwise.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("write wants PATH [DATA], got %d arguments", len(args))
			}
			p, err := pathArg(cmd, args[:1])
			if err != nil {
				return err
			}
			cas := ifGen >= 0
			var data []byte
			if len(args) == 2 {
				data = []byte(args[1])
			} else {
				// One byte over the limit is enough for the cell to say TOO_LARGE.
				data, err = io.ReadAll(io.LimitReader(a.stdin, chubby.MAX_CONTENT_BYTES+1))
				if err != nil {
					return refused("write", p, fmt.Errorf("reading standard input: %w", err))
				}
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "write", p, func(s *client.Session) error {
				opts := client.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE, InitialContent: data}
				if cas {
					opts = client.OpenOptions{Mode: chubby.OpenMode_READ_WRITE}
				}
				h, err := s.Open(ctx, p, opts)
				if err != nil {
					return refused("write", p, err)
				}
				if h.Created() {
					return nil // created with data as its content
				}
				var setOpts []client.SetOption
				if cas {
					setOpts = append(setOpts, client.IfGeneration(ifGen))
				}
				if _, err := h.SetContents(ctx, data, setOpts...); err != nil {
					return refused("write", p, err)
				}
				return nil
			})
		},
	}
	cmd.Flags().Int64Var(&ifGen, "if-generation", -1,
		"write only if the file's content generation is N (compare-and-swap; -1: write unconditionally)")
	return cmd
}

func (a *app) mkdirCommand() *cobra.Command {
	var parents, ephemeral bool
	cmd := &cobra.Command{
		Use:   "mkdir [-p] [--ephemeral] PATH",
		Short: "make a directory",
		Long: `mkdir makes the directory PATH. With -p it also makes missing parents, and
an existing directory is not an error.

With --ephemeral the directory belongs to this command's session: it is
kept while the session lives, even when empty, and deleted when the
session ends (at once if empty, else as soon as it becomes empty). So
mkdir --ephemeral holds its session: it makes the directory, says so on
standard error, and keeps the session alive until SIGINT or SIGTERM (exit
0; the directory goes then) or until the session is lost (exit 1). The
global --timeout bounds only connecting and making the directory.
Parents made by -p are permanent.`,
		Example: `  chubbyfs mkdir -p /config/app
  chubbyfs mkdir --ephemeral /workers/$(hostname) &   # there while the job runs
  ./job.sh; kill %1`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			opts := client.MkdirOptions{Parents: parents, Ephemeral: ephemeral}
			mkdir := func(ctx context.Context, s *client.Session) error {
				_, err := s.Mkdir(ctx, p, opts)
				return err
			}
			if ephemeral {
				return a.hold(cmd.Context(), "mkdir", p, "ephemeral directory "+p, mkdir)
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "mkdir", p, func(s *client.Session) error {
				return refusedOrNil("mkdir", p, mkdir(ctx, s))
			})
		},
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "make missing parents; no error if PATH exists (default: off)")
	cmd.Flags().BoolVar(&ephemeral, "ephemeral", false,
		"make the directory ephemeral and hold this command's session until interrupted; the directory goes with the session (default: permanent)")
	return cmd
}

func (a *app) rmCommand() *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "rm [-r] PATH",
		Short: "delete a file or directory",
		Long: `rm deletes the node at PATH. A directory with children is deleted only
with -r, together with everything below it.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			if p == "/" {
				return usagef("rm: refusing to delete /")
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "rm", p, func(s *client.Session) error {
				h, err := s.Open(ctx, p, client.OpenOptions{Mode: chubby.OpenMode_READ_WRITE})
				if err != nil {
					return refused("rm", p, err)
				}
				if err := h.Delete(ctx, recursive); err != nil {
					return refused("rm", p, err)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "delete a directory with everything below it (default: off)")
	return cmd
}

func (a *app) touchCommand() *cobra.Command {
	var ephemeral, sequential, asJSON bool
	cmd := &cobra.Command{
		Use:   "touch [--ephemeral] [--sequential] [--json] PATH",
		Short: "create an empty file if it is missing",
		Long: `touch creates an empty file at PATH if nothing is there; an existing node
is left as it is. Its parent directory must exist.

With --sequential it always creates a new file: the cell appends a
10-digit counter of the parent directory to the name (/jobs/job- becomes
/jobs/job-0000000007), and touch prints the path it made. The counter
only grows, so a name is never made twice (unless the directory is
deleted and made again).

With --ephemeral the new file belongs to this command's session, so it is
deleted as soon as chubbyfs exits: ephemeral files are for programs that
hold a session (use the client library), and this flag is mostly for tests.

With --json it prints one JSON object, for scripts: {"path" (the path
made, or PATH), "created" (false: PATH was there already)}.`,
		Example: `  chubbyfs touch /config/app/ready
  chubbyfs touch --sequential /jobs/job-     # prints /jobs/job-0000000000, then ...01`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			opts := client.OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE, Ephemeral: ephemeral, Sequential: sequential}
			if sequential {
				opts.Create = chubby.CreateMode_CREATE_NEW
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "touch", p, func(s *client.Session) error {
				h, err := s.Open(ctx, p, opts)
				if err != nil {
					return refused("touch", p, err)
				}
				// Said before the close, which may fail after the node was made.
				switch {
				case asJSON:
					if err := a.writeJSON(touchJSON{Path: h.Path(), Created: h.Created()}); err != nil {
						return err
					}
				case sequential:
					fmt.Fprintln(a.stdout, h.Path())
				}
				return refusedOrNil("touch", p, h.Close(ctx))
			})
		},
	}
	cmd.Flags().BoolVar(&ephemeral, "ephemeral", false,
		"create the file ephemeral: deleted when this command's session ends, i.e. when chubbyfs exits (default: permanent)")
	cmd.Flags().BoolVar(&sequential, "sequential", false,
		"always create, appending the parent directory's 10-digit counter to the name, and print the path made (default: off)")
	jsonFlag(cmd, &asJSON, "one JSON object: the path and whether it was created")
	return cmd
}

// touchJSON is touch --json's output.
type touchJSON struct {
	Path    string `json:"path"`
	Created bool   `json:"created"`
}

func refusedOrNil(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return refused(op, path, err)
}

func (a *app) sequencerCommand() *cobra.Command {
	seq := &cobra.Command{
		Use:   "sequencer",
		Short: "work with sequencers",
		Long: `A sequencer names a held lock: its node, mode and lock generation. Its
printable form is chubby-seq:v1:<E|S>:<lock_generation>:<instance>:<path>
(lock puts it in CHUBBY_SEQUENCER for the command it runs).`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("sequencer needs a sub-command: check")
		},
	}
	var asJSON bool
	check := &cobra.Command{
		Use:   "check [--json] SEQ",
		Short: "ask the cell whether a sequencer is still valid",
		Long: `check asks the cell whether the sequencer SEQ (its printable form, as in
CHUBBY_SEQUENCER) still names a held lock. It prints "valid" and exits 0,
or prints "not valid: <reason>" and exits 1. A malformed SEQ is a usage
error (exit 2). With --json it prints one JSON object instead, for
scripts: {"valid", "reason" ("" when valid)}, with the same exit status.
It needs no session.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("sequencer check wants exactly one SEQ, got %d arguments", len(args))
			}
			sq, err := client.ParseSequencer(args[0])
			if err != nil {
				return usagef("sequencer check: %s", client.Describe(err))
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			c, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			valid, reason, err := c.CheckSequencer(ctx, sq)
			if err != nil {
				return refused("sequencer check", "", err)
			}
			if asJSON {
				if err := a.writeJSON(sequencerJSON{Valid: valid, Reason: reason}); err != nil {
					return err
				}
			} else if valid {
				fmt.Fprintln(a.stdout, "valid")
			} else {
				fmt.Fprintf(a.stdout, "not valid: %s\n", reason)
			}
			if !valid {
				return &exitError{code: exitRefused}
			}
			return nil
		},
	}
	jsonFlag(check, &asJSON, "one JSON object")
	seq.AddCommand(check)
	return seq
}

// sequencerJSON is sequencer check --json's output.
type sequencerJSON struct {
	Valid  bool   `json:"valid"`
	Reason string `json:"reason"`
}

// statusJSON is status --json's output: the CellStatus with roles as names.
type statusJSON struct {
	Cell          string          `json:"cell"`
	MasterID      string          `json:"master_id"`
	MasterAddress string          `json:"master_address"`
	Epoch         int64           `json:"epoch"`
	Replicas      []replicaStatus `json:"replicas"`
	Sessions      int64           `json:"sessions"`
	Nodes         int64           `json:"nodes"`
	Handles       int64           `json:"handles"`
	LocksHeld     int64           `json:"locks_held"`
	CommittedOp   int64           `json:"committed_op"`
	UptimeMs      int64           `json:"uptime_ms"`
	Version       string          `json:"version"`
	Security      string          `json:"security,omitempty"`
}

type replicaStatus struct {
	ID          string `json:"id"`
	Address     string `json:"address"`
	Role        string `json:"role"` // MASTER, REPLICA, RECOVERING, UNREACHABLE
	CommittedOp int64  `json:"committed_op"`
}

func toStatusJSON(st *chubby.CellStatus) statusJSON {
	out := statusJSON{
		Cell: st.GetCell(), MasterID: st.GetMasterId(), MasterAddress: st.GetMasterAddress(),
		Epoch: st.GetEpoch(), Sessions: st.GetSessions(), Nodes: st.GetNodes(), Handles: st.GetHandles(),
		LocksHeld: st.GetLocksHeld(), CommittedOp: st.GetCommittedOp(), UptimeMs: st.GetUptimeMs(),
		Version: st.GetVersion(), Security: st.GetSecurity(), Replicas: []replicaStatus{},
	}
	for _, r := range st.GetReplicas() {
		out.Replicas = append(out.Replicas, replicaStatus{ID: r.GetId(), Address: r.GetAddress(),
			Role: r.GetRole().String(), CommittedOp: r.GetCommittedOp()})
	}
	return out
}

func (a *app) statusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "show the cell's replicas, master, epoch and counts",
		Long: `status shows the cell: its replicas and their roles, which one is master,
the master's epoch, and counts of sessions, nodes, handles and held locks.
The epoch is one number that packs two, shown after it: the epoch of the
cell's configuration (raised by each voter change) and the view within it
(raised by each view change, i.e. each new master). A replica's COMMITTED
is "-" when the replica that answered does not know it (it reports only
its own; members shows how far each is behind the master).

Exit status 0 when the cell has a master, 1 when the replica that answered
knows none (a cell electing one, or a replica not yet added to a cell:
members shows its membership) or none answered.

With --json it prints the same as one JSON object, for scripts:
{"cell", "master_id", "master_address", "epoch" (the packed number),
"replicas": [{"id", "address", "role", "committed_op" (-1: not
reported)}], "sessions", "nodes", "handles", "locks_held", "committed_op",
"uptime_ms", "version", "security"}. It needs no session.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usagef("status takes no arguments")
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				st, err := c.Status(ctx)
				if err != nil {
					return refused("status", "", err)
				}
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					enc.SetIndent("", "  ")
					if err := enc.Encode(toStatusJSON(st)); err != nil {
						return err
					}
				} else {
					printStatus(a.stdout, st)
				}
				if st.GetMasterAddress() == "" {
					return &exitError{code: exitRefused}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text (default: text)")
	return cmd
}

func printStatus(w io.Writer, st *chubby.CellStatus) {
	fmt.Fprintf(w, "cell:       %s\n", st.GetCell())
	fmt.Fprintf(w, "master:     %s\n", masterText(st))
	fmt.Fprintf(w, "version:    %s, up %v, committed op %d\n", st.GetVersion(),
		(time.Duration(st.GetUptimeMs()) * time.Millisecond).Round(time.Second), st.GetCommittedOp())
	fmt.Fprintf(w, "sessions:   %d   nodes: %d   handles: %d   locks held: %d\n",
		st.GetSessions(), st.GetNodes(), st.GetHandles(), st.GetLocksHeld())
	if sec := st.GetSecurity(); sec != "" {
		fmt.Fprintf(w, "security:   %s\n", sec)
	}
	fmt.Fprintln(w, "replicas:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tADDRESS\tROLE\tCOMMITTED")
	unknown := false
	for _, r := range st.GetReplicas() {
		role := strings.ToLower(r.GetRole().String())
		committed := strconv.FormatInt(r.GetCommittedOp(), 10)
		if r.GetCommittedOp() < 0 {
			committed, unknown = "-", true
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.GetId(), r.GetAddress(), role, committed)
	}
	tw.Flush()
	if unknown {
		fmt.Fprintln(w, "  (COMMITTED -: not reported; the replica that answered knows only its own. members shows how far each is behind the master.)")
	}
}

// masterText says which replica is master, at which address and epoch,
// or that the replica that answered knows none.
func masterText(st *chubby.CellStatus) string {
	if st.GetMasterAddress() == "" {
		return "none known to the replica that answered (a cell electing one, or a replica not yet added to a cell: chubbyfs members shows its membership)"
	}
	return fmt.Sprintf("%s at %s, epoch %s", st.GetMasterId(), st.GetMasterAddress(), epochText(st.GetEpoch()))
}

// epochText shows a master epoch with the two numbers it packs (see
// master.EpochParts): "17179869189 (configuration epoch 4, view 4)".
func epochText(epoch int64) string {
	config, view, ok := master.EpochParts(epoch)
	if !ok {
		return strconv.FormatInt(epoch, 10) + " (no master)"
	}
	return fmt.Sprintf("%d (configuration epoch %d, view %d)", epoch, config, view)
}

// releaseContext gives clean-up calls a bound of their own, so that they
// run even when the command's context has ended.
func releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

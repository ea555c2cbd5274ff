package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/backup"
	"github.com/chubbygo/chubby/fs"
)

// exportCommand is chubbyd export --data DIR [FILE].
func exportCommand(stdout, stderr io.Writer) *cobra.Command {
	var data, cellName string
	var dry, committed, asJSON bool
	var maxSessions int
	cmd := &cobra.Command{
		Use:   "export --data DIR FILE | --data DIR --dry-run",
		Short: "write a backup from a stopped replica's data directory (for a cell with no master)",
		Long: `export reads the data directory DIR of a stopped replica — its snapshot
and its log —, applies the log to the snapshot as the replica would when it
starts, and writes the state as a backup FILE that chubbyd restore seeds a
new cell from. It is the way out for a cell that has no master and cannot
elect one: a cell that lost a quorum of its disks for good, or one whose
replicas all say (on /healthz and in their log) that their view is the last
of its epoch. A cell with a master is backed up with chubbyfs snapshot save.

DIR is only read; a running replica holds it locked, and export refuses it.

Which replica to export: run export --dry-run on every replica you still
have, and export the one with the highest LAST-NORMAL-VIEW, and of those the
highest LAST: that log holds every entry the cell committed (the others may
lack some). By default export applies that log's every command, the ones it
does not know committed too: those were either committed (and acknowledged
writes are among them) or never acknowledged to anyone, as after any
failover. --committed applies only what the replica knows committed.

Then, for every replica of the new cell:

  chubbyd restore FILE --data NEWDIR --id N --peers P

and start them with chubbyd serve. Sessions end as after a failover; the
contents, ACLs, lock generations and the timestamp oracle's mark are kept.

With --dry-run --json, the log state is one JSON object: id, view, epoch,
view_counter, last_of_epoch, last_normal_view, commit, snapshot_index,
last, and what an export would hold: index, applied, uncommitted, nodes.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if data == "" {
				return usageError{errors.New("--data is required")}
			}
			if dry != (len(args) == 0) {
				return usageError{errors.New("give FILE, or --dry-run without FILE")}
			}
			limits := fs.DefaultLimits()
			limits.MaxSessionsPerPrincipal = maxSessions
			o := cell.ExportOptions{Cell: cellName, Committed: committed, Dry: dry, Limits: &limits,
				Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
			if dry {
				ex, err := cell.Export(data, nil, o)
				if err != nil {
					return err
				}
				return printLogState(stdout, ex, asJSON)
			}
			var ex *cell.Exported
			err := backup.WriteFile(args[0], func(w io.Writer) (err error) {
				ex, err = cell.Export(data, w, o)
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "exported replica %d of %s to %s in %v: the state after log index %d (%d commands applied, %d past the commit hint), %d nodes, %d sessions, %d bytes\n",
				ex.ID, data, args[0], ex.Took.Round(time.Millisecond), ex.Index, ex.Applied, ex.Uncommitted,
				ex.Counts.Nodes, ex.Counts.Sessions, ex.Header.Length)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&data, "data", "", "the stopped replica's data directory (only read)")
	f.StringVar(&cellName, "cell", cell.DefaultConfig().Cell, "the cell's name, written in the backup's header")
	f.BoolVar(&dry, "dry-run", false, "write nothing: print the replica's log state and what an export would hold")
	f.BoolVar(&asJSON, "json", false, "with --dry-run: print one JSON object")
	f.BoolVar(&committed, "committed", false, "apply only the entries the replica knows committed")
	f.IntVar(&maxSessions, "max-sessions-per-principal", fs.DefaultLimits().MaxSessionsPerPrincipal,
		"as chubbyd serve will use it: the state is checked against it")
	return cmd
}

// printLogState prints what export --dry-run found.
func printLogState(w io.Writer, ex *cell.Exported, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(struct {
			cell.LogState
			Index       uint64 `json:"index"`
			Applied     int    `json:"applied"`
			Uncommitted int    `json:"uncommitted"`
			Nodes       int    `json:"nodes"`
		}{ex.LogState, ex.Index, ex.Applied, ex.Uncommitted, ex.Counts.Nodes})
	}
	s := ex.LogState
	stuck := ""
	if s.LastOfEpoch {
		stuck = " (the last view of its epoch: this cell cannot elect a master)"
	}
	_, err := fmt.Fprintf(w, "REPLICA %d\nVIEW %d (epoch %d, view %d of it)%s\nLAST-NORMAL-VIEW %d\nLAST %d\nCOMMIT %d\nSNAPSHOT %d\nEXPORT the state after index %d: %d commands applied, %d past the commit hint, %d nodes\n",
		s.ID, s.View, s.Epoch, s.ViewCounter, stuck, s.LastNormalView, s.Last, s.Commit, s.SnapshotIndex,
		ex.Index, ex.Applied, ex.Uncommitted, ex.Counts.Nodes)
	return err
}

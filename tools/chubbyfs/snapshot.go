package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/cell/backup"
	"github.com/chubbygo/chubby/gen/fsm"
)

// saveAttempts is how many times snapshot save starts over when the
// snapshot it reads is replaced on the master (a new master answers).
const saveAttempts = 3

func (a *app) snapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot save FILE",
		Short: "back up the cell: save a snapshot of its whole state to a file",
		Args:  anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("snapshot wants a sub-command: save FILE")
		},
	}
	cmd.AddCommand(a.snapshotSaveCommand())
	return cmd
}

// snapshotJSON is snapshot save --json's output.
type snapshotJSON struct {
	File      string `json:"file"`
	LogIndex  int64  `json:"log_index"`
	Bytes     int64  `json:"bytes"`
	ElapsedMs int64  `json:"elapsed_ms"`
}

func (a *app) snapshotSaveCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "save [--json] FILE",
		Short: "save a snapshot of the cell's whole state to FILE",
		Long: `save asks the master for a snapshot of the cell's state as it is now and
writes it to FILE: every node with its contents, metadata, generations and
ACL names, the locks, the sessions, and the timestamp oracle's mark, under
a header naming the cell, the log index of the snapshot, its format
versions, its length and CRC-32C. chubbyd restore seeds the data
directories of a new cell from FILE.

The master stores the snapshot as it stores its periodic ones (off its
loop: the cell goes on serving), then sends it from its disk in chunks;
on a terminal the progress is shown on stderr. The file is written as
FILE.partial and renamed to FILE once it is complete, checked (length,
CRC-32C) and synced; an existing FILE is replaced only then. It needs
change_acl on "/" where the cell has ACLs (the file reveals every file's
contents) and no session. If another master takes over midway, save
starts again (up to 3 times).

It prints "saved the snapshot at log index N (B bytes) to FILE in T";
with --json one JSON object instead, for scripts: {"file", "log_index",
"bytes", "elapsed_ms"}.

The global --timeout bounds the whole save only when it is given: the
default 30 s is too short for a big cell.

Exit status: 0 saved; 1 refused (permission, no master) or failed (the
file could not be written, the snapshot was replaced 3 times).`,
		Example: `  chubbyfs snapshot save /backups/chubby-$(date +%F).snap
  chubbyd restore /backups/chubby-2026-12-04.snap --data /var/lib/chubby-restored`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("snapshot save wants exactly one FILE, got %d arguments", len(args))
			}
			ctx := cmd.Context()
			if cmd.Flags().Changed("timeout") {
				var cancel func()
				ctx, cancel = a.commandContext(ctx)
				defer cancel()
			}
			c, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			file := args[0]
			progress := a.progress()
			start := time.Now()
			for attempt := 1; ; attempt++ {
				var h *fsm.BackupHeader
				err := backup.WriteFile(file, func(w io.Writer) (err error) {
					h, err = backup.Save(ctx, c.SnapshotRead, w, progress)
					return err
				})
				if progress != nil {
					fmt.Fprintln(a.stderr)
				}
				if errors.Is(err, backup.ErrReplaced) && attempt < saveAttempts {
					fmt.Fprintf(a.stderr, "chubbyfs: snapshot save: %v; starting again\n", err)
					continue
				}
				if err != nil {
					return refused("snapshot save", file, err)
				}
				elapsed := time.Since(start)
				if asJSON {
					return a.writeJSON(snapshotJSON{File: file, LogIndex: h.Index, Bytes: h.Length, ElapsedMs: elapsed.Milliseconds()})
				}
				fmt.Fprintf(a.stdout, "saved the snapshot at log index %d (%d bytes) to %s in %v\n",
					h.Index, h.Length, file, elapsed.Round(time.Millisecond))
				return nil
			}
		},
	}
	jsonFlag(cmd, &asJSON, "one JSON object")
	return cmd
}

// progress returns a progress line writer for stderr when it is a
// terminal, nil otherwise.
func (a *app) progress() backup.Progress {
	f, ok := a.stderr.(*os.File)
	if !ok {
		return nil
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return func(done, total int64) {
		pct := 100.0
		if total > 0 {
			pct = float64(done) * 100 / float64(total)
		}
		fmt.Fprintf(a.stderr, "\rsaving snapshot: %.1f of %.1f MiB (%.0f%%)", float64(done)/(1<<20), float64(total)/(1<<20), pct)
	}
}

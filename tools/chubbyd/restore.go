package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/fs"
)

// restoreCommand is chubbyd restore FILE --data DIR.
func restoreCommand(stdout, stderr io.Writer) *cobra.Command {
	var id uint64
	var peers, listen, advertise, data string
	var maxSessions int
	d := cell.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "restore FILE --data DIR [--id N --peers P | --listen ADDR]",
		Short: "seed a new replica's data directory from a backup (chubbyfs snapshot save)",
		Long: `restore seeds the data directory DIR of replica --id of a new cell from
FILE, a backup written by chubbyfs snapshot save. It reads and checks all
of FILE first — the header, the length and CRC-32C, the snapshot's format
version (a newer one than this chubbyd reads is refused, naming both) and
the whole state — and writes nothing unless FILE is sound. DIR must not
exist or be empty.

Seed every replica of the new cell from the same FILE, each with its own
--id and the same --peers (the new cell's members, as chubbyd serve takes
them; the saved cell's members and addresses play no part), then start
each with chubbyd serve and the same --id, --peers and --data:

  chubbyd restore cell.snap --data /var/lib/chubby --id 2 \
    --peers 1=10.0.0.1:7000/10.0.0.1:7100,2=10.0.0.2:7000/10.0.0.2:7100,3=10.0.0.3:7000/10.0.0.3:7100

Without --peers the new cell is this replica alone, at --listen (or
--advertise). The new cell serves exactly the saved state: contents,
metadata, generations, ACLs, locks and the timestamp oracle's mark; the
saved sessions are treated as after a failover (their clients would have
to come back within their lease; otherwise they end, their locks are
released and their sequencers refused).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if data == "" {
				return usageError{errors.New("--data is required")}
			}
			ps, err := parsePeers(peers)
			if err != nil {
				return usageError{err}
			}
			addr := listen
			if advertise != "" {
				addr = advertise
			}
			limits := fs.DefaultLimits()
			limits.MaxSessionsPerPrincipal = maxSessions
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			start := time.Now()
			res, err := cell.Restore(f, cell.RestoreOptions{DataDir: data, ID: id, Peers: ps, Listen: addr, Limits: &limits,
				Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				return err
			}
			h := res.Header
			fmt.Fprintf(stdout, "restored %s into %s for replica %d in %v: cell %q at log index %d (snapshot version %d, saved %s from replica %s), %d nodes, %d sessions\n",
				args[0], data, id, time.Since(start).Round(time.Millisecond), h.Cell, h.Index, h.SnapshotVersion,
				time.UnixMilli(h.SavedUnixMs).UTC().Format(time.RFC3339), h.MasterId, res.Counts.Nodes, res.Counts.Sessions)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&data, "data", "", "the data directory to seed (must not exist or be empty)")
	f.Uint64Var(&id, "id", d.ID, "the replica the directory is for, in --peers")
	f.StringVar(&peers, "peers", "", "the new cell's replicas: id=CLIENT_ADDR[/PEER_ADDR],... as chubbyd serve takes them (empty: a one-replica cell at --listen)")
	f.StringVar(&listen, "listen", d.Listen, "a one-replica cell's client address, as chubbyd serve will use it")
	f.StringVar(&advertise, "advertise", "", "a one-replica cell's address clients are told to use (default: --listen)")
	f.IntVar(&maxSessions, "max-sessions-per-principal", fs.DefaultLimits().MaxSessionsPerPrincipal,
		"as chubbyd serve will use it: the saved state is checked against it")
	return cmd
}

// Command chubbyd runs a replica of a Chubby lock cell.
//
//	chubbyd dev                 a local one-replica cell, no set-up (data in ./chubby-data)
//	chubbyd serve --data DIR    one replica with explicit settings
//
// Every flag is listed, with its default, by --help.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/rpc"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	id, cellName, listen, advertise, httpListen, data, logLevel string
	lease                                                       time.Duration
	maxConns                                                    int
}

func run(args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:   "chubbyd",
		Short: "chubbyd runs a replica of a Chubby lock cell",
		Long: `chubbyd runs a replica of a Chubby lock cell: advisory locks and a tiny
file system for small data, over Thrift RPC (Kitex), durable in Badger.

Start a local cell with no set-up:   chubbyd dev
Then talk to it:                     chubbyfs --cell 127.0.0.1:7000 status`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)

	dev := &options{}
	devCmd := &cobra.Command{
		Use:   "dev",
		Short: "start a local one-replica cell with no set-up",
		Long: `dev starts a local cell: one replica on 127.0.0.1:7000 keeping its data
under ./chubby-data (both can be changed), with status and metrics on HTTP.
Stop it with Ctrl-C; start it again on the same --data and everything
acknowledged is still there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), dev, true, stdout, stderr) },
	}
	addFlags(devCmd, dev, "127.0.0.1:7000", "./chubby-data", "127.0.0.1:7001")

	srv := &options{}
	serveCmd := &cobra.Command{
		Use:   "serve",
		Short: "run one replica with explicit settings",
		Long: `serve runs one replica. A cell of one replica is its own master.
(Replication across 3 or 5 replicas, with --peers, is not built yet.)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if srv.data == "" {
				return usageError{errors.New("--data is required")}
			}
			return serve(cmd.Context(), srv, false, stdout, stderr)
		},
	}
	addFlags(serveCmd, srv, "127.0.0.1:7000", "", "")
	root.AddCommand(devCmd, serveCmd)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "chubbyd: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) || strings.Contains(err.Error(), "unknown flag") ||
			strings.Contains(err.Error(), "unknown command") || strings.Contains(err.Error(), "invalid argument") ||
			strings.Contains(err.Error(), "accepts") {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

func addFlags(c *cobra.Command, o *options, listen, data, httpListen string) {
	f := c.Flags()
	f.StringVar(&o.id, "id", "r1", "this replica's id")
	f.StringVar(&o.cellName, "cell", "local", "the cell's name")
	f.StringVar(&o.listen, "listen", listen, "client RPC address (host:port)")
	f.StringVar(&o.advertise, "advertise", "", "address clients are told to use (default: the listen address)")
	f.StringVar(&o.httpListen, "http", httpListen, "address for /status, /metrics and /healthz (empty: off)")
	f.StringVar(&o.data, "data", data, "data directory (Badger log and snapshots)")
	f.DurationVar(&o.lease, "lease", 12*time.Second, "session lease")
	f.IntVar(&o.maxConns, "max-connections", 15000, "client connections accepted at once (this machine allows 20,000 open files per process)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
}

func serve(ctx context.Context, o *options, dev bool, stdout, stderr io.Writer) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usageError{fmt.Errorf("--log-level: %w", err)}
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := rpc.InstallProcessLoggers(logger); err != nil {
		return err
	}
	data, err := filepath.Abs(o.data)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	s, err := cell.New(cell.Config{
		ID:             o.id,
		Cell:           o.cellName,
		Listen:         o.listen,
		Advertise:      o.advertise,
		HTTPListen:     o.httpListen,
		DataDir:        data,
		Lease:          o.lease,
		MaxConnections: o.maxConns,
		Logger:         logger,
	})
	if err != nil {
		return err
	}
	if dev {
		fmt.Fprintf(stdout, `chubby cell %q is up (1 replica, epoch %d)
  clients:  %s      e.g.  chubbyfs --cell %s status
  status:   http://%s/status   metrics: http://%s/metrics
  data:     %s
  export CHUBBY_CELL=%s
Ctrl-C stops it; start it again on the same --data to get everything back.
`, o.cellName, s.Epoch(), s.Addr(), s.Addr(), s.HTTPAddr(), s.HTTPAddr(), data, s.Addr())
	}
	return s.Serve(ctx)
}

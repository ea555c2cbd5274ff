// Command chubbyd runs a replica of a Chubby lock cell.
//
//	chubbyd dev                 a local one-replica cell, no set-up (data in ./chubby-data)
//	chubbyd serve --data DIR    one replica with explicit settings
//	chubbyd restore FILE --data DIR   seed a new replica's data directory from a backup
//	chubbyd export --data DIR FILE    a backup from a stopped replica's directory (a cell with no master)
//
// Every flag is listed, with its default, by --help.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/version"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/rpc"
	"github.com/chubbygo/chubby/rpc/tlsconf"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	cellName, listen, advertise, httpListen, data, logLevel, peers, peerListen string
	id                                                                         uint64
	replicas                                                                   int
	lease                                                                      time.Duration
	maxConns, maxConnsPerIP                                                    int
	connLimits                                                                 string
	firstCallTimeout, connIdleTimeout                                          time.Duration
	maxSessionsPerPrincipal                                                    int
	snapshotEvery                                                              uint64
	explicit                                                                   map[string]bool

	// Discovery (cell.Config's Join ... PromoteAfter).
	join, gossipListen          string
	bootstrapExpect, targetSize int
	deadAfter, promoteAfter     time.Duration
	tlsCert, tlsKey, tlsCA      string
	tlsClientCA, admin          string
}

func run(args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:   "chubbyd",
		Short: "chubbyd runs a replica of a Chubby lock cell",
		Long: `chubbyd runs a replica of a Chubby lock cell: advisory locks and a tiny
file system for small data, over Thrift RPC (Kitex), durable in Badger.

Start a local cell with no set-up:   chubbyd dev
Then talk to it:                     chubbyfs --cell 127.0.0.1:7000 status`,
		Version:       version.Read().Line("chubbyd"),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n") // version.Info.Line's one line
	root.Flags().BoolP("version", "v", false, "print the version, the commit built from and the Go version, and exit")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)

	dev := &options{}
	devCmd := &cobra.Command{
		Use:   "dev",
		Short: "start a local one-replica cell with no set-up",
		Long: `dev starts a local cell: one replica on 127.0.0.1:7000 keeping its data
under ./chubby-data (both can be changed), with status and metrics on HTTP.
--replicas 3 or 5 starts a replicated cell in this one process (clients may
name any replica: the others answer where the master is). Stop it with
Ctrl-C; start it again on the same --data and everything acknowledged is
still there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			markExplicit(cmd, dev)
			return serve(cmd.Context(), dev, true, stdout, stderr)
		},
	}
	addFlags(devCmd, dev, "./chubby-data", "127.0.0.1:7080")
	devCmd.Flags().IntVar(&dev.replicas, "replicas", 1, "replicas in the local cell: 1, 3 or 5 (in this one process; replica i listens on --listen's port + i-1, its peer port + 100, its HTTP port + i-1, data in --data/r<i>)")

	srv := &options{}
	serveCmd := &cobra.Command{
		Use:   "serve",
		Short: "run one replica with explicit settings",
		Long: `serve runs one replica of a cell. Without --peers the cell is this
replica alone. With --peers every replica of the cell is named, this one
included, as id=CLIENT_ADDR/PEER_ADDR (the peer address carries replica
traffic; when it is left out it is the client address's host with the port
plus 100), e.g.

  chubbyd serve --id 2 --data /var/lib/chubby \
    --peers 1=10.0.0.1:7000/10.0.0.1:7100,2=10.0.0.2:7000/10.0.0.2:7100,3=10.0.0.3:7000/10.0.0.3:7100

and --listen defaults to this replica's client address. Every replica of a
new cell must be given the same --peers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			markExplicit(cmd, srv)
			if srv.data == "" {
				return usageError{errors.New("--data is required")}
			}
			return serve(cmd.Context(), srv, false, stdout, stderr)
		},
	}
	addFlags(serveCmd, srv, "", "")
	root.AddCommand(devCmd, serveCmd, restoreCommand(stdout, stderr), exportCommand(stdout, stderr))

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

// addFlags adds the flags of dev and serve; those that set a cell.Config
// field default to cell.DefaultConfig's value.
func addFlags(c *cobra.Command, o *options, data, httpListen string) {
	d := cell.DefaultConfig()
	f := c.Flags()
	f.Uint64Var(&o.id, "id", d.ID, "this replica's id in --peers")
	f.StringVar(&o.peers, "peers", "", "the cell's replicas: id=CLIENT_ADDR[/PEER_ADDR],... (empty: a one-replica cell)")
	f.StringVar(&o.peerListen, "peer-listen", "", "address for replica traffic (default: this replica's PEER_ADDR in --peers)")
	f.StringVar(&o.cellName, "cell", d.Cell, "the cell's name")
	f.StringVar(&o.listen, "listen", d.Listen, "client RPC address (host:port)")
	f.StringVar(&o.advertise, "advertise", "", "address clients are told to use (default: the listen address)")
	f.StringVar(&o.httpListen, "http", httpListen, "address for /status, /metrics and /healthz (empty: off)")
	f.StringVar(&o.data, "data", data, "data directory (Badger log and snapshots)")
	f.DurationVar(&o.lease, "lease", d.Lease, "session lease")
	f.Uint64Var(&o.snapshotEvery, "snapshot-every", d.SnapshotEvery, "take a snapshot (and drop the log it covers) after this many log entries")
	f.IntVar(&o.maxConns, "max-connections", d.MaxConnections, "client connections accepted at once (this machine allows 20,000 open files per process)")
	f.IntVar(&o.maxConnsPerIP, "max-connections-per-ip", d.MaxConnectionsPerIP, "client connections accepted at once from one remote address (more are reset at accept); loopback addresses have no such cap unless --connection-limits gives one")
	f.StringVar(&o.connLimits, "connection-limits", "", "per-address caps for named prefixes, overriding --max-connections-per-ip: PREFIX=N,... (a bare address is a prefix of itself; the longest matching prefix wins; 0 = no per-address cap), e.g. a proxy 10.0.0.9=8000; added to the built-in 127.0.0.0/8=0,::1=0")
	f.DurationVar(&o.firstCallTimeout, "first-call-timeout", d.FirstCallTimeout, "close a client connection that has sent no call this long after it was accepted")
	f.DurationVar(&o.connIdleTimeout, "conn-idle-timeout", d.ConnIdleTimeout, "close a client connection that carries no call and has sent nothing for this long (a parked KeepAlive or Acquire is a call)")
	f.IntVar(&o.maxSessionsPerPrincipal, "max-sessions-per-principal", fs.DefaultLimits().MaxSessionsPerPrincipal,
		"live sessions one principal may hold (anonymous is one principal: every caller of a plaintext cell); 0: no bound but the cell's 200,000. Every replica must use the same value")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.join, "join", "", "gossip addresses (host:port) of any members of the cell, comma-separated: find the cell with memberlist and join it as a learner (the replica id then comes from the data directory)")
	f.StringVar(&o.gossipListen, "gossip-listen", "", "gossip address (default: --listen's host, port + 200)")
	f.IntVar(&o.bootstrapExpect, "bootstrap-expect", 0, "with nothing on disk: 1 starts a new cell of this replica alone, N > 1 waits until N replicas find each other and they form it; 0 waits to be added to an existing cell")
	f.IntVar(&o.targetSize, "target-size", d.TargetSize, "voters the master grows the cell to: 1, 3 or 5")
	f.DurationVar(&o.deadAfter, "dead-after", d.DeadAfter, "replace a voter gossip reports dead, with no replica traffic either, for this long")
	f.DurationVar(&o.promoteAfter, "promote-after", d.PromoteAfter, "promote a learner caught up and healthy for this long")
	f.StringVar(&o.tlsCert, "tls-cert", "", "this replica's certificate (PEM; needs serverAuth and clientAuth): with --tls-key and --tls-ca, mutual TLS on the client, peer and gossip ports (files are re-read when they change)")
	f.StringVar(&o.tlsKey, "tls-key", "", "the private key of --tls-cert (PEM)")
	f.StringVar(&o.tlsCA, "tls-ca", "", "the cell's CA (PEM): it signed every replica's certificate, and clients' unless --tls-client-ca is given")
	f.StringVar(&o.tlsClientCA, "tls-client-ca", "", "a separate CA for client certificates (then no client certificate passes for a replica)")
	f.StringVar(&o.admin, "admin", "", "the cell's first administrator principal: a new cell creates /acl/admin listing it and protects / and /acl with it (changes nothing once the cell has ACLs)")
}

// tlsReloader builds the replica's TLS material from the --tls-* flags,
// nil when none is given (plaintext).
func tlsReloader(o *options, logger *slog.Logger) (*tlsconf.Reloader, error) {
	if o.tlsCert == "" && o.tlsKey == "" && o.tlsCA == "" && o.tlsClientCA == "" {
		return nil, nil
	}
	if o.tlsCert == "" || o.tlsKey == "" || o.tlsCA == "" {
		return nil, usageError{errors.New("TLS needs all of --tls-cert, --tls-key and --tls-ca")}
	}
	return tlsconf.New(tlsconf.Config{
		Files:  tlsconf.Files{Cert: o.tlsCert, Key: o.tlsKey, CA: o.tlsCA, ClientCA: o.tlsClientCA},
		Logger: logger,
	})
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// connConfig returns the client connection limits of the flags
// (--max-connections, --max-connections-per-ip, --connection-limits,
// --first-call-timeout, --conn-idle-timeout) as the fields of a
// cell.Config.
func connConfig(o *options) (cell.Config, error) {
	limits, err := rpc.ParseConnLimits(o.connLimits)
	if err != nil {
		return cell.Config{}, fmt.Errorf("--connection-limits: %w", err)
	}
	// Zero takes cell's default and cell.New refuses negative values.
	return cell.Config{
		MaxConnections: o.maxConns, MaxConnectionsPerIP: o.maxConnsPerIP, ConnectionLimits: limits,
		FirstCallTimeout: o.firstCallTimeout, ConnIdleTimeout: o.connIdleTimeout,
	}, nil
}

// withConns returns c with the connection limits of conns.
func withConns(c, conns cell.Config) cell.Config {
	c.MaxConnections, c.MaxConnectionsPerIP, c.ConnectionLimits = conns.MaxConnections, conns.MaxConnectionsPerIP, conns.ConnectionLimits
	c.FirstCallTimeout, c.ConnIdleTimeout = conns.FirstCallTimeout, conns.ConnIdleTimeout
	return c
}

// parsePeers parses --peers: id=CLIENT_ADDR[/PEER_ADDR],...
func parsePeers(spec string) ([]cell.Peer, error) {
	if spec == "" {
		return nil, nil
	}
	var out []cell.Peer
	for _, item := range strings.Split(spec, ",") {
		idS, addrs, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return nil, fmt.Errorf("--peers: %q is not id=CLIENT_ADDR[/PEER_ADDR]", item)
		}
		id, err := strconv.ParseUint(idS, 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("--peers: %q: the id must be a number > 0", item)
		}
		client, peer, hasPeer := strings.Cut(addrs, "/")
		host, port, err := net.SplitHostPort(client)
		if err != nil {
			return nil, fmt.Errorf("--peers: %q: %w", item, err)
		}
		if !hasPeer {
			p, err := strconv.Atoi(port)
			if err != nil || p+100 > 65535 {
				return nil, fmt.Errorf("--peers: %q: no peer address and the port cannot be shifted by 100", item)
			}
			peer = net.JoinHostPort(host, strconv.Itoa(p+100))
		}
		if _, _, err := net.SplitHostPort(peer); err != nil {
			return nil, fmt.Errorf("--peers: %q: %w", item, err)
		}
		out = append(out, cell.Peer{ID: id, Addr: client, PeerAddr: peer})
	}
	return out, nil
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
	peers, err := parsePeers(o.peers)
	if err != nil {
		return usageError{err}
	}
	conns, err := connConfig(o)
	if err != nil {
		return usageError{err}
	}
	if dev && o.replicas != 1 {
		if o.replicas != 3 && o.replicas != 5 {
			return usageError{fmt.Errorf("--replicas must be 1, 3 or 5, not %d", o.replicas)}
		}
		return serveLocalCell(ctx, o, conns, data, logger, stdout)
	}
	listen := o.listen
	for _, p := range peers {
		if p.ID == o.id && !flagSet(o, "listen") {
			listen = p.Addr
		}
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	id := o.id
	gossip := o.join != "" || o.gossipListen != "" || o.bootstrapExpect > 0
	if gossip && len(peers) > 0 {
		return usageError{errors.New("--peers and --join/--bootstrap-expect/--gossip-listen are two ways to make a cell: give one")}
	}
	if gossip && !flagSet(o, "id") {
		id = 0 // from the data directory's identity
	}
	tr, err := tlsReloader(o, logger)
	if err != nil {
		return err
	}
	s, err := cell.New(withConns(cell.Config{
		ID:              id,
		TLS:             tr,
		Admin:           o.admin,
		Join:            splitList(o.join),
		GossipListen:    o.gossipListen,
		BootstrapExpect: o.bootstrapExpect,
		TargetSize:      o.targetSize,
		DeadAfter:       o.deadAfter,
		PromoteAfter:    o.promoteAfter,
		Cell:            o.cellName,
		Peers:           peers,
		PeerListen:      o.peerListen,
		Listen:          listen,
		Advertise:       o.advertise,
		HTTPListen:      o.httpListen,
		DataDir:         data,
		Lease:           o.lease,
		SnapshotEvery:   o.snapshotEvery,
		Limits:          limits(o),
		Logger:          logger,
	}, conns))
	if err != nil {
		return err
	}
	if dev {
		fmt.Fprintf(stdout, `chubby cell %q is up (1 replica)
  clients:  %s      e.g.  chubbyfs --cell %s status
  status:   http://%s/status   metrics: http://%s/metrics
  data:     %s
  export CHUBBY_CELL=%s
Ctrl-C stops it; start it again on the same --data to get everything back.
`, o.cellName, s.Addr(), s.Addr(), s.HTTPAddr(), s.HTTPAddr(), data, s.Addr())
	} else {
		serveBanner(stdout, o, s, data, tr != nil)
	}
	return s.Serve(ctx)
}

// serveBanner tells the operator, on one screen, what this replica is and
// where it listens (serve; dev has its own).
func serveBanner(w io.Writer, o *options, s *cell.Server, data string, tls bool) {
	orOff := func(a string) string {
		if a == "" {
			return "off"
		}
		return a
	}
	security := "PLAINTEXT (no --tls-*: anyone who reaches the ports can use the cell)"
	if tls {
		security = "mutual TLS on the client, peer and gossip ports"
	}
	status := "off"
	if a := s.HTTPAddr(); a != "" {
		status = "http://" + a + "/status"
	}
	id := "given by the cell when it adds this replica"
	if s.ID() != 0 {
		id = strconv.FormatUint(s.ID(), 10)
	}
	fmt.Fprintf(w, `chubbyd: replica %s of cell %q starting
  clients:  %s
  gossip:   %s
  status:   %s
  data:     %s
  security: %s
`, id, o.cellName, s.Addr(), orOff(s.GossipAddr()), status, data, security)
}

// limits is the replicated state's limits: fs's defaults with the
// per-principal session bound of the flag.
func limits(o *options) *fs.Limits {
	l := fs.DefaultLimits()
	l.MaxSessionsPerPrincipal = o.maxSessionsPerPrincipal
	return &l
}

// markExplicit records which flags were given on the command line.
func markExplicit(cmd *cobra.Command, o *options) {
	o.explicit = map[string]bool{}
	cmd.Flags().Visit(func(f *pflag.Flag) { o.explicit[f.Name] = true })
}

// flagSet reports whether a flag was given explicitly (recorded by run).
func flagSet(o *options, name string) bool { return o.explicit[name] }

// serveLocalCell runs a whole replicated cell in this process (dev
// --replicas N): replica i on --listen's port + i-1, peer port + 100,
// HTTP port + i-1, data in DATA/r<i>.
func serveLocalCell(ctx context.Context, o *options, conns cell.Config, data string, logger *slog.Logger, stdout io.Writer) error {
	var peers []cell.Peer
	for i := 1; i <= o.replicas; i++ {
		client, err := cell.ShiftPort(o.listen, i-1)
		if err != nil {
			return usageError{err}
		}
		peer, err := cell.ShiftPort(client, 100)
		if err != nil {
			return usageError{err}
		}
		peers = append(peers, cell.Peer{ID: uint64(i), Addr: client, PeerAddr: peer})
	}
	tr, err := tlsReloader(o, logger)
	if err != nil {
		return err
	}
	var servers []*cell.Server
	for _, p := range peers {
		dir := filepath.Join(data, fmt.Sprintf("r%d", p.ID))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		httpAddr := ""
		if o.httpListen != "" {
			var err error
			if httpAddr, err = cell.ShiftPort(o.httpListen, int(p.ID)-1); err != nil {
				return usageError{err}
			}
		}
		s, err := cell.New(withConns(cell.Config{
			ID: p.ID, Cell: o.cellName, Peers: peers, Listen: p.Addr, HTTPListen: httpAddr,
			DataDir: dir, Lease: o.lease, SnapshotEvery: o.snapshotEvery, Logger: logger,
			TLS: tr, Admin: o.admin, Limits: limits(o),
		}, conns))
		if err != nil {
			for _, s := range servers {
				s.Stop()
			}
			return err
		}
		servers = append(servers, s)
	}
	var addrs []string
	for _, p := range peers {
		addrs = append(addrs, p.Addr)
	}
	all := strings.Join(addrs, ",")
	fmt.Fprintf(stdout, `chubby cell %q is up: %d replicas in this process (a master is elected in well under a second)
  clients:  %s      e.g.  chubbyfs --cell %s status
  status:   http://%s/status (replica 1; replica i at HTTP port + i-1)
  data:     %s/r1 .. r%d
  export CHUBBY_CELL=%s
Ctrl-C stops it; start it again on the same --data to get everything back.
`, o.cellName, len(peers), all, all, servers[0].HTTPAddr(), data, len(peers), all)
	errs := make(chan error, len(servers))
	for _, s := range servers {
		go func() { errs <- s.Serve(ctx) }()
	}
	var first error
	for range servers {
		if err := <-errs; err != nil && first == nil {
			first = err
			for _, s := range servers {
				s.Stop()
			}
		}
	}
	return first
}

// Command chubbyfs is the command-line tool for people to use a Chubby lock
// cell: list, read and write its files, make directories, hold a lock while
// a command runs (like flock), watch a file or directory's events, check
// sequencers, show the cell's status and membership, remove a replica
// from the cell's configuration, and back the cell up (snapshot save).
//
//	chubbyfs [--cell ADDRS] [--timeout D] COMMAND [flags] ARGS
//
// Exit status: 0 success, 1 the cell refused the operation or could not be
// reached (or a lock wait timed out), 2 usage errors (bad flags or
// arguments, a malformed path or sequencer), 3 a change whose outcome is
// unknown (`members remove`: proposed, not known committed). `lock` exits
// with the status of the command it ran, or 1 when the lock was lost while
// it ran. Every flag is listed, with its default, by --help.
//
// Every command that prints takes --json (its shape is in its --help);
// --version prints the release, commit and Go version; `chubbyfs
// completion SHELL` prints a completion script whose PATH completion asks
// the cell.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/cell/version"
	"github.com/chubbygo/chubby/client"
)

func main() {
	// Kitex logs through its own global logger; chubbyfs reports every
	// failure itself, so Kitex's copies would only be noise on stderr.
	klog.SetOutput(io.Discard)
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

// Exit statuses.
const (
	exitOK      = 0
	exitRefused = 1 // the cell refused, could not be reached, or a lock wait timed out
	exitUsage   = 2 // bad flags or arguments, malformed path or sequencer
	exitUnknown = 3 // a change was asked for and may or may not take effect
)

// defaultTimeout bounds a whole command (but not the COMMAND run by lock).
const defaultTimeout = 30 * time.Second

// app holds one invocation's I/O and global flags; nothing is global.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	cell    string        // --cell
	timeout time.Duration // --timeout

	tlsCA, tlsCert, tlsKey string // --tls-*

	// addrs and useTLS are what connect dialled, for diagnose.
	addrs  []string
	useTLS bool
}

// exitError carries the exit status a command ends with and the message to
// print (none when msg is empty). A refusal also carries the failure
// behind it and what it was ("<op> [<path>]"), for run to diagnose.
type exitError struct {
	code   int
	msg    string
	cause  error
	prefix string
}

func (e *exitError) Error() string { return e.msg }

// usagef reports a usage error (exit 2).
func usagef(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

// refused reports a failed operation on path (exit 1) as
// "<op> <path>: <reason>".
func refused(op, path string, err error) error {
	reason := client.Describe(err)
	if errors.Is(err, context.DeadlineExceeded) {
		reason = "timed out (see --timeout)"
	}
	prefix := op
	if path != "" {
		prefix += " " + path
	}
	return &exitError{code: exitRefused, msg: prefix + ": " + reason, cause: err, prefix: prefix}
}

// run executes one chubbyfs command line and returns its exit status. It is
// main without the process: tests call it directly.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	// A usage error points at the help of the command that was misused
	// (cobra returns the deepest command it found, root for an unknown one).
	helpHint := "Run 'chubbyfs --help' for usage."
	if cmd != nil && cmd != root {
		helpHint = "Run '" + cmd.CommandPath() + " --help' for usage."
	}
	var ee *exitError
	if errors.As(err, &ee) {
		switch found, replaces := diagnose(ctx, ee.cause, a.addrs, a.useTLS); {
		case found == "" || ee.prefix == "":
		case replaces:
			ee.msg = ee.prefix + ": " + found
		default:
			ee.msg += " (" + found + ")"
		}
		if ee.msg != "" {
			fmt.Fprintf(stderr, "chubbyfs: %s\n", ee.msg)
		}
		if ee.code == exitUsage {
			fmt.Fprintln(stderr, helpHint)
		}
		return ee.code
	}
	// Anything else comes from cobra itself: unknown command or flag,
	// wrong number of arguments.
	fmt.Fprintf(stderr, "chubbyfs: %v\n%s\n", err, helpHint)
	return exitUsage
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "chubbyfs",
		Short: "chubbyfs talks to a Chubby lock cell",
		Long: `chubbyfs talks to a Chubby lock cell: a tiny file system of small files
and directories, each of which can be locked (exclusive or shared).

Each command opens one session with the cell and closes it when done.
Paths are absolute, like /a/b; names are made of A-Z a-z 0-9 . _ -

Exit status: 0 success; 1 the cell refused the operation (not found, lock
held, ...), could not be reached, or a lock wait timed out; 2 usage error
(bad flags or arguments, malformed path or sequencer); 3 the outcome of a
change is unknown (members remove: proposed, not known committed; check
with members). lock exits with the status of the command it ran, or 1
when the lock was lost while it ran (see lock --help).

Every command that prints takes --json: one JSON value on standard output
instead of text (each command's --help gives its shape; those that run
until stopped print one object a line). Errors stay text on standard
error, with the same exit status.`,
		Example: `  chubbyd dev &                      # a local cell on 127.0.0.1:7000
  chubbyfs mkdir -p /config/app
  echo 'db=10.0.0.5' | chubbyfs write /config/app/settings
  chubbyfs cat /config/app/settings
  chubbyfs ls -l /config/app
  chubbyfs lock /config/app/leader -- ./serve.sh   # holds the lock while serve.sh runs
  chubbyfs registry register web web-1 10.0.0.7:80 # registered until Ctrl-C
  chubbyfs counter next --cas /config/app/build    # 1, 2, 3, ...
  chubbyfs watch /config/app                       # prints changes as they happen
  chubbyfs status
  chubbyfs members                                 # the cell's voters, learners and spares
  source <(chubbyfs completion bash)               # TAB completes commands, flags, the cell's paths`,
		Version:       version.Read().Line("chubbyfs"),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("missing command")
		},
	}
	// --version prints the one line of version.Info.Line; cobra's own
	// completion command (bash, zsh, fish, powershell) stays enabled.
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().BoolP("version", "v", false, "print the version, the commit built from and the Go version, and exit")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usagef("%v", err)
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.cell, "cell", "",
		"the cell's replica addresses, host:port, comma separated (default: $"+client.EnvCell+", else "+client.DefaultAddr+")")
	pf.DurationVar(&a.timeout, "timeout", defaultTimeout,
		"give up on the whole command after this long (0: never)")
	pf.StringVar(&a.tlsCA, "tls-ca", "", "the CA that signed the replicas' certificates: speak mutual TLS (default: $"+client.EnvTLSCA+"; neither: plaintext)")
	pf.StringVar(&a.tlsCert, "tls-cert", "", "this client's certificate, whose common name is its principal (default: $"+client.EnvTLSCert+"; none: anonymous)")
	pf.StringVar(&a.tlsKey, "tls-key", "", "the key of --tls-cert (default: $"+client.EnvTLSKey+")")
	root.AddCommand(
		a.lsCommand(), a.statCommand(), a.catCommand(), a.writeCommand(),
		a.mkdirCommand(), a.rmCommand(), a.touchCommand(), a.lockCommandWithShow(), a.electionCommand(),
		a.watchCommand(), a.sequencerCommand(), a.statusCommand(), a.membersCommand(),
		a.aclCommand(), a.whoamiCommand(), a.tsCommand(), a.txnCommand(),
		a.registryCommand(), a.counterCommand(), a.snapshotCommand(),
	)
	// cobra's completion command, made now rather than at Execute so that
	// a missing or unknown shell is a usage error (exit 2), not its help.
	// It takes its output as it is made: set it first.
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.RunE = func(*cobra.Command, []string) error {
				return usagef("completion needs a shell: bash, zsh, fish or powershell")
			}
		}
	}
	a.addPathCompletion(root)
	// The Use lines already show each command's flags.
	var quiet func(*cobra.Command)
	quiet = func(c *cobra.Command) {
		c.DisableFlagsInUseLine = true
		for _, sub := range c.Commands() {
			quiet(sub)
		}
	}
	quiet(root)
	return root
}

// commandContext bounds ctx by the global --timeout.
func (a *app) commandContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.timeout > 0 {
		return context.WithTimeout(ctx, a.timeout)
	}
	return context.WithCancel(ctx)
}

// connect builds a client for --cell, else CHUBBY_CELL, else the default.
func (a *app) connect(ctx context.Context) (*client.Client, error) {
	list, source := a.cell, "--cell"
	if list == "" {
		list, source = a.getenv(client.EnvCell), "$"+client.EnvCell
	}
	cfg := client.Config{ClientName: "chubbyfs"}
	if host, err := os.Hostname(); err == nil {
		cfg.ClientName = fmt.Sprintf("chubbyfs@%s:%d", host, os.Getpid())
	}
	cfg.Addrs = []string{client.DefaultAddr}
	if list != "" {
		addrs, err := client.ParseAddrs(list)
		if err != nil {
			return nil, usagef("%s: %v", source, err)
		}
		cfg.Addrs = addrs
	}
	tc, err := a.tlsConfig()
	if err != nil {
		return nil, usagef("%v", err)
	}
	cfg.TLS = tc
	a.addrs, a.useTLS = cfg.Addrs, tc != nil
	c, err := client.Connect(ctx, cfg)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return c, nil
}

// tlsConfig is the TLS configuration the --tls-* flags, else the
// CHUBBY_TLS_* variables, ask for; nil: plaintext.
func (a *app) tlsConfig() (*tls.Config, error) {
	pick := func(flag, env string) string {
		if flag != "" {
			return flag
		}
		return a.getenv(env)
	}
	ca, cert, key := pick(a.tlsCA, client.EnvTLSCA), pick(a.tlsCert, client.EnvTLSCert), pick(a.tlsKey, client.EnvTLSKey)
	if ca == "" {
		if cert != "" || key != "" {
			return nil, fmt.Errorf("--tls-cert and --tls-key need --tls-ca (or $%s)", client.EnvTLSCA)
		}
		return nil, nil
	}
	return client.TLSFromFiles(ca, cert, key, a.getenv(client.EnvTLSServerName))
}

// withClient runs fn with a client (closed afterwards) under the command's
// --timeout: for the commands that need no session.
func (a *app) withClient(cmd *cobra.Command, fn func(context.Context, *client.Client) error) error {
	ctx, cancel := a.commandContext(cmd.Context())
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// withSession runs fn with a fresh session and closes the session (and
// client) afterwards, also when fn fails or ctx has ended. op and path
// label failures to set the session up.
func (a *app) withSession(ctx context.Context, op, path string, fn func(*client.Session) error) error {
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		return refused(op, path, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.Close(cctx) // the session expires on its own if this fails
	}()
	return fn(s)
}

// pathArg checks that cmd got exactly one valid path.
func pathArg(cmd *cobra.Command, args []string) (string, error) {
	if len(args) != 1 {
		return "", usagef("%s wants exactly one PATH, got %d arguments", cmd.Name(), len(args))
	}
	if err := client.ValidatePath(args[0]); err != nil {
		return "", usagef("%s: %s", cmd.Name(), client.Describe(err))
	}
	return args[0], nil
}

// anyArgs lets every argument count through to RunE, which reports wrong
// counts as usage errors with its own message.
func anyArgs(*cobra.Command, []string) error { return nil }

// Command monitor watches a set of worker processes through a Chubby
// directory, the second of the two classic uses in the Chubby paper
// (Burrows, OSDI 2006) that tools/examples shows; the first, master
// election, is tools/examples/election.
//
// Each worker creates an ephemeral file named after itself in the
// directory, holding its status. The file lives exactly as long as the
// worker's session: when the worker exits cleanly it closes its session and
// the file goes at once; when it dies (kill -9, a crash, a cut network) its
// KeepAlives stop and the master ends the session when its lease runs out,
// deleting the file. A monitor opens the directory asking for child-added,
// child-removed and child-modified events, lists it once, and from then on
// learns of every worker that starts, dies or changes its status from an
// event, without polling.
//
// Usage:
//
//	monitor work  --cell 127.0.0.1:7000 --dir /workers --name w1 --status ready
//	monitor watch --cell 127.0.0.1:7000 --dir /workers
//
// work runs until SIGINT or SIGTERM; it prints "working /workers/w1" once
// its file exists. watch prints one line per change until Ctrl-C:
//
//	present w1 ready      (in the directory when the monitor started)
//	added   w2 ready
//	removed w1
//	modified w2 busy      (a worker rewrote its status)
//	relist                (events were lost: the present lines follow again)
//
// A worker is reported removed at most about one lease (plus the
// KeepAlive margin) after it died: the cell's session lease bounds how
// long a dead worker looks alive.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Change is one thing the monitor learned.
type Change struct {
	Kind   string // present, added, removed, modified, relist
	Worker string // the file's name in the directory
	Status string // its content (not for removed and relist)
}

func (c Change) String() string {
	if c.Status == "" {
		return fmt.Sprintf("%s %s", c.Kind, c.Worker)
	}
	return fmt.Sprintf("%s %s %s", c.Kind, c.Worker, c.Status)
}

// Watch reports the workers in dir and every change to them to report,
// until ctx ends (nil) or the session is lost (an error). It creates dir
// (and its parents) if missing.
func Watch(ctx context.Context, s *client.Session, dir string, report func(Change)) error {
	if err := mkdirAll(ctx, s, dir); err != nil {
		return err
	}
	h, err := s.Open(ctx, dir, client.OpenOptions{
		EventMask: chubby.EVENT_MASK_CHILD_ADDED | chubby.EVENT_MASK_CHILD_REMOVED | chubby.EVENT_MASK_CHILD_MODIFIED,
	})
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = h.Close(cctx)
	}()
	// Events come from the Open on, so listing after it misses nothing; a
	// worker added in between is reported twice (present, then added).
	list := func() error {
		entries, err := h.ReadDir(ctx)
		if err != nil {
			return fmt.Errorf("list %s: %w", dir, err)
		}
		for _, e := range entries {
			report(Change{Kind: "present", Worker: e.GetName(), Status: status(ctx, s, path.Join(dir, e.GetName()))})
		}
		return nil
	}
	if err := list(); err != nil {
		return ignoreEnd(ctx, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-h.Events():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("watch %s: session lost: %w", dir, s.Err())
			}
			switch ev.Kind {
			case chubby.EventKind_CHILD_ADDED:
				report(Change{Kind: "added", Worker: ev.Child, Status: status(ctx, s, path.Join(dir, ev.Child))})
			case chubby.EventKind_CHILD_REMOVED:
				report(Change{Kind: "removed", Worker: ev.Child})
			case chubby.EventKind_CHILD_MODIFIED:
				report(Change{Kind: "modified", Worker: ev.Child, Status: status(ctx, s, path.Join(dir, ev.Child))})
			case chubby.EventKind_EVENTS_LOST:
				report(Change{Kind: "relist"})
				if err := list(); err != nil {
					return ignoreEnd(ctx, err)
				}
			}
		}
	}
}

// status reads a worker's status; "?" if it cannot (the worker may be gone
// already: its removal follows as an event).
func status(ctx context.Context, s *client.Session, p string) string {
	h, err := s.Open(ctx, p, client.OpenOptions{})
	if err != nil {
		return "?"
	}
	defer h.Close(context.WithoutCancel(ctx))
	data, _, err := h.GetContentsAndStat(ctx)
	if err != nil {
		return "?"
	}
	return string(data)
}

// ignoreEnd drops errors that only say ctx ended.
func ignoreEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Work announces a worker: it creates the ephemeral file dir/name holding
// status, which lives as long as s. It creates dir if missing.
func Work(ctx context.Context, s *client.Session, dir, name, status string) (string, error) {
	if err := mkdirAll(ctx, s, dir); err != nil {
		return "", err
	}
	p := path.Join(dir, name)
	if _, err := s.CreateFile(ctx, p, []byte(status), client.CreateOptions{Ephemeral: true}); err != nil {
		return "", fmt.Errorf("create %s: %w", p, err)
	}
	return p, nil
}

// mkdirAll makes dir and its parents, permanent, unless they exist.
func mkdirAll(ctx context.Context, s *client.Session, dir string) error {
	if dir == "/" {
		return nil
	}
	if _, err := s.Mkdir(ctx, dir, client.MkdirOptions{Parents: true}); err != nil && !client.IsCode(err, chubby.ErrorCode_EXISTS) {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	return nil
}

func main() {
	klog.SetOutput(io.Discard)
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "monitor: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "watch" && args[0] != "work" {
		return fmt.Errorf("usage: monitor watch|work --dir DIR [--cell ADDRS] [--name NAME --status S]")
	}
	fs := flag.NewFlagSet("monitor "+args[0], flag.ContinueOnError)
	cell := fs.String("cell", "", "the cell's replica addresses, comma separated (default: $CHUBBY_CELL, else "+client.DefaultAddr+")")
	dir := fs.String("dir", "/workers", "the directory of worker files")
	name := fs.String("name", "", "work: this worker's name (default: worker-<pid>)")
	st := fs.String("status", "ready", "work: this worker's status, the file's content")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := client.ValidatePath(*dir); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := client.Config{}
	if *cell != "" {
		addrs, err := client.ParseAddrs(*cell)
		if err != nil {
			return fmt.Errorf("--cell: %w", err)
		}
		cfg.Addrs = addrs
	}
	c, err := client.Connect(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		return fmt.Errorf("new session: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.Close(cctx) // a clean exit deletes a worker's file at once
	}()

	if args[0] == "watch" {
		return Watch(ctx, s, *dir, func(ch Change) { fmt.Fprintln(stdout, ch) })
	}
	if *name == "" {
		*name = fmt.Sprintf("worker-%d", os.Getpid())
	}
	p, err := Work(ctx, s, *dir, *name, *st)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "working %s\n", p)
	select {
	case <-ctx.Done():
		return nil
	case <-s.Done():
		return fmt.Errorf("session lost: %w", s.Err())
	}
}

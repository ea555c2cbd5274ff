package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// watchSetupTimeout bounds connecting, creating the session and opening
// PATH when --timeout is 0.
const watchSetupTimeout = 30 * time.Second

// eventName is a name --events accepts and its event mask bits.
type eventName struct {
	name string
	mask int32
}

// eventNames are the names --events accepts.
var eventNames = []eventName{
	{"all", chubby.EVENT_MASK_ALL},
	{"contents", chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED},
	{"children", chubby.EVENT_MASK_CHILD_ADDED | chubby.EVENT_MASK_CHILD_REMOVED | chubby.EVENT_MASK_CHILD_MODIFIED},
	{"child-added", chubby.EVENT_MASK_CHILD_ADDED},
	{"child-removed", chubby.EVENT_MASK_CHILD_REMOVED},
	{"child-modified", chubby.EVENT_MASK_CHILD_MODIFIED},
	{"lock", chubby.EVENT_MASK_LOCK_ACQUIRED},
	{"conflicts", chubby.EVENT_MASK_CONFLICTING_LOCK_REQUEST},
	{"invalid", chubby.EVENT_MASK_HANDLE_INVALID},
}

// parseEvents turns --events (comma separated names) into an event mask.
func parseEvents(list string) (int32, error) {
	var mask int32
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(eventNames, func(e eventName) bool { return e.name == name })
		if i < 0 {
			var known []string
			for _, e := range eventNames {
				known = append(known, e.name)
			}
			return 0, fmt.Errorf("unknown event %q (known: %s)", name, strings.Join(known, ", "))
		}
		mask |= eventNames[i].mask
	}
	return mask, nil
}

// kindName is how watch prints an event kind: lower case with dashes.
func kindName(k chubby.EventKind) string {
	switch k {
	case chubby.EventKind_FILE_CONTENTS_MODIFIED:
		return "contents-modified"
	case chubby.EventKind_EVENTS_LOST:
		return "events-lost"
	}
	return strings.ReplaceAll(strings.ToLower(k.String()), "_", "-")
}

// watchLine is one line of watch --json.
type watchLine struct {
	Time              string `json:"time"` // RFC 3339, UTC, milliseconds
	Seq               int64  `json:"seq,omitempty"`
	Kind              string `json:"kind"`
	Path              string `json:"path"`
	Child             string `json:"child,omitempty"`
	ContentGeneration int64  `json:"content_generation,omitempty"`
	LockGeneration    int64  `json:"lock_generation,omitempty"`
	LockMode          string `json:"lock_mode,omitempty"`
	Lost              int64  `json:"lost,omitempty"`
	Epoch             int64  `json:"epoch,omitempty"`
}

func handleLine(e client.Event) watchLine {
	l := watchLine{Time: stamp(e.Time), Seq: e.Seq, Kind: kindName(e.Kind), Path: e.Path, Child: e.Child,
		ContentGeneration: e.ContentGeneration, LockGeneration: e.LockGeneration}
	if e.LockMode != 0 {
		l.LockMode = strings.ToLower(e.LockMode.String())
	}
	if e.Kind == chubby.EventKind_EVENTS_LOST {
		l.Lost = e.Seq - e.LostFrom + 1
	}
	return l
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// text is the human form of a line: time, kind, path, details.
func (l watchLine) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-24s %s", l.Time, l.Kind, l.Path)
	if l.Child != "" {
		fmt.Fprintf(&b, " child=%s", l.Child)
	}
	if l.ContentGeneration != 0 {
		fmt.Fprintf(&b, " generation=%d", l.ContentGeneration)
	}
	if l.LockMode != "" {
		fmt.Fprintf(&b, " mode=%s lock-generation=%d", l.LockMode, l.LockGeneration)
	}
	if l.Lost != 0 {
		fmt.Fprintf(&b, " lost=%d (re-read)", l.Lost)
	}
	if l.Epoch != 0 {
		fmt.Fprintf(&b, " epoch=%s", epochText(l.Epoch))
	}
	return b.String()
}

type watchFlags struct {
	events string
	json   bool
	count  int
}

func (a *app) watchCommand() *cobra.Command {
	var f watchFlags
	cmd := &cobra.Command{
		Use:   "watch [--events LIST] [--json] [--count N] PATH",
		Short: "print the events of a file or directory as they happen",
		Long: `watch opens PATH (it must exist) asking for the events in --events and
prints each one as it happens, one line each: the master's time (UTC), the
kind, PATH and details. It runs until Ctrl-C (exit 0), until PATH is
deleted (after printing handle-invalid; exit 0), until --count events
were printed (exit 0), or until the session is lost (exit 1).

Events (--events, comma separated; default all):
  contents        contents-modified: the file was written (generation=)
  children        child-added, child-removed, child-modified (a file in the
                  directory was written); each also by its own name
  lock            lock-acquired: the lock went from free to held
  conflicts       conflicting-lock-request: the lock this handle holds is
                  wanted (never, here: watch holds no lock)
  invalid         handle-invalid: PATH was deleted
Session events are printed too: jeopardy, safe, master-changed (the cell
failed over; no event is lost by it), expired; and events-lost when the
cell dropped events because the watcher did not keep up (re-read PATH).

With --json each line is a JSON object, for scripts: {"time", "seq",
"kind", "path", "child", "content_generation", "lock_generation",
"lock_mode", "lost", "epoch"} (zero fields left out). The global --timeout
bounds only connecting and opening PATH.`,
		Example: `  chubbyfs watch /services/db/primary
  chubbyfs watch --events children --json /services
  chubbyfs watch --count 1 --events contents /config/app && reload-app`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			mask, err := parseEvents(f.events)
			if err != nil {
				return usagef("watch: --events: %v", err)
			}
			if f.count < 0 {
				return usagef("watch: --count must not be negative")
			}
			return a.watch(cmd.Context(), p, mask, f)
		},
	}
	cmd.Flags().StringVar(&f.events, "events", "all", "the events to watch, comma separated: all, contents, children, child-added, child-removed, child-modified, lock, conflicts, invalid")
	cmd.Flags().BoolVar(&f.json, "json", false, "print one JSON object a line instead of text")
	cmd.Flags().IntVar(&f.count, "count", 0, "exit after this many events of PATH (0: run until Ctrl-C)")
	return cmd
}

// watch opens p with mask and prints its events and the session's until
// ctx ends, SIGINT or SIGTERM comes, p is deleted or f.count events were
// printed.
func (a *app) watch(ctx context.Context, p string, mask int32, f watchFlags) error {
	return a.withLongSession(ctx, "watch", p, func(ctx, setupCtx context.Context, s *client.Session) error {
		return a.watchOn(ctx, setupCtx, s, p, mask, f)
	})
}

// watchOn is watch's loop on session s.
func (a *app) watchOn(ctx, setupCtx context.Context, s *client.Session, p string, mask int32, f watchFlags) error {
	h, err := s.Open(setupCtx, p, client.OpenOptions{EventMask: mask})
	if err != nil {
		return refused("watch", p, err)
	}
	fmt.Fprintf(a.stderr, "chubbyfs: watching %s; Ctrl-C to stop\n", p)

	enc := json.NewEncoder(a.stdout)
	emit := func(l watchLine) {
		if f.json {
			_ = enc.Encode(l)
		} else {
			fmt.Fprintln(a.stdout, l.text())
		}
	}
	events, sessionEvents := h.Events(), s.Events()
	printed := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-events:
			if !ok {
				if s.Err() != nil {
					return sessionLost("watch", p, s)
				}
				return nil // after handle-invalid
			}
			emit(handleLine(e))
			printed++
			if e.Kind == chubby.EventKind_HANDLE_INVALID || f.count > 0 && printed >= f.count {
				return nil
			}
		case ev, ok := <-sessionEvents:
			if !ok {
				sessionEvents = nil // the handle's channel closes too, and says why
				continue
			}
			if ev.Kind == client.EventLostEvents {
				continue // the handle's events-lost line says it
			}
			l := watchLine{Time: stamp(ev.At), Kind: ev.Kind.String(), Path: p}
			if ev.Kind == client.EventMasterChanged {
				l.Epoch = ev.Epoch
			}
			emit(l)
		}
	}
}

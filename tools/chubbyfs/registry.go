package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/client/recipe"
)

// defaultRegistryDir is where registry keeps its services unless --dir says.
const defaultRegistryDir = "/registry"

func (a *app) registryCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "register service instances, list them, follow their changes",
		Long: `A service registry (recipe.Registry): each instance of service NAME is an
ephemeral file DIR/NAME/INSTANCE whose content is its address, owned by
the session that registered it. An instance whose program dies leaves the
registry when its session expires (one session lease after it stopped
renewing); one that ends cleanly leaves at once.

  register  register INSTANCE of NAME at ADDR and hold it until interrupted
  list      print the instances of NAME
  watch     print the instances of NAME at each change`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("registry needs a sub-command: register, list or watch")
		},
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", defaultRegistryDir, "the registry's directory")
	cmd.AddCommand(a.registryRegisterCommand(&dir), a.registryListCommand(&dir), a.registryWatchCommand(&dir))
	return cmd
}

// registryArgs checks --dir and that a registry command got want
// arguments, of which NAME (and, for register, INSTANCE) are names; it
// returns the service's directory.
func registryArgs(verb, dir string, args []string, want int) (string, error) {
	if len(args) != want {
		return "", usagef("%s wants %d arguments, got %d", verb, want, len(args))
	}
	if err := client.ValidatePath(dir); err != nil {
		return "", usagef("%s: --dir: %s", verb, client.Describe(err))
	}
	for _, name := range args[:min(want, 2)] {
		if err := client.ValidatePath("/" + name); err != nil || strings.Contains(name, "/") || name == "" {
			return "", usagef("%s: %q is not a name (1..255 bytes of A-Z a-z 0-9 . _ -)", verb, name)
		}
	}
	return path.Join(dir, args[0]), nil
}

func (a *app) registryRegisterCommand(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "register [--dir DIR] NAME INSTANCE ADDR",
		Short: "register an instance and hold it until interrupted",
		Long: `register makes INSTANCE of service NAME at ADDR: the ephemeral file
DIR/NAME/INSTANCE (missing directories are made), owned by this command's
session. An instance stays registered only while its session lives, so
register holds its session: it keeps it alive until SIGINT or SIGTERM
(exit 0; the instance leaves at once) or until the session is lost (exit
1). The global --timeout bounds only connecting and registering. An
INSTANCE already registered is refused (exists, exit 1).`,
		Example: `  chubbyfs registry register web web-1 10.0.0.7:8080 &
  chubbyfs registry list web`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := registryArgs("registry register", *dir, args, 3)
			if err != nil {
				return err
			}
			p = path.Join(p, args[1])
			return a.hold(cmd.Context(), "registry register", p, "instance "+p, func(ctx context.Context, s *client.Session) error {
				r, err := recipe.NewRegistry(s, *dir)
				if err != nil {
					return err
				}
				_, err = r.Register(ctx, args[0], args[1], []byte(args[2]))
				return err
			})
		},
	}
}

// instanceJSON is one instance in registry list --json and watch --json.
type instanceJSON struct {
	Instance string `json:"instance"`
	Addr     string `json:"addr"`
	Owner    int64  `json:"owner"` // the session that registered it
}

func toInstancesJSON(is []recipe.ServiceInstance) []instanceJSON {
	out := []instanceJSON{}
	for _, i := range is {
		out = append(out, instanceJSON{Instance: i.Name, Addr: string(i.Addr), Owner: int64(i.Owner)})
	}
	return out
}

func (a *app) registryListCommand(dir *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--dir DIR] [--json] NAME",
		Short: "print the instances of a service",
		Long: `list prints the instances of service NAME, one "INSTANCE ADDR" line each,
sorted by instance; nothing if there are none. With --json: one array of
{"instance", "addr", "owner"} (owner: the session that registered it).`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := registryArgs("registry list", *dir, args, 1)
			if err != nil {
				return err
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "registry list", p, func(s *client.Session) error {
				r, err := recipe.NewRegistry(s, *dir)
				if err != nil {
					return refused("registry list", p, err)
				}
				is, err := r.List(ctx, args[0])
				if err != nil {
					return refused("registry list", p, err)
				}
				if asJSON {
					return json.NewEncoder(a.stdout).Encode(toInstancesJSON(is))
				}
				for _, i := range is {
					fmt.Fprintf(a.stdout, "%s %s\n", i.Name, i.Addr)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array instead of text (default: text)")
	return cmd
}

// changeJSON is one line of registry watch --json.
type changeJSON struct {
	Instances []instanceJSON `json:"instances"`
	Added     []string       `json:"added,omitempty"`
	Removed   []string       `json:"removed,omitempty"`
	Modified  []string       `json:"modified,omitempty"`
}

// changeText is one line of registry watch.
func changeText(ch recipe.RegistryChange) string {
	words := []string{"set"}
	for _, i := range ch.Instances {
		words = append(words, i.Name+"="+string(i.Addr))
	}
	for _, part := range []struct {
		label string
		names []string
	}{{"added", ch.Added}, {"removed", ch.Removed}, {"modified", ch.Modified}} {
		if len(part.names) > 0 {
			words = append(words, part.label+"="+strings.Join(part.names, ","))
		}
	}
	return strings.Join(words, " ")
}

func (a *app) registryWatchCommand(dir *string) *cobra.Command {
	var asJSON bool
	var count int
	cmd := &cobra.Command{
		Use:   "watch [--dir DIR] [--json] [--count N] NAME",
		Short: "print the instances of a service at each change",
		Long: `watch prints the instances of service NAME now, then again after each
change (an instance registered, gone, or registered again), learnt from
the directory's child events, not by polling. Each line is the whole set
and what changed:

  set web-1=10.0.0.7:8080 web-2=10.0.0.8:8080 added=web-2

With --json, one object a line: {"instances": [{"instance", "addr",
"owner"}], "added", "removed", "modified"}. The service's directory is
made if missing. It runs until Ctrl-C (exit 0), until --count lines were
printed (exit 0), until the directory is deleted (exit 0) or until the
session is lost (exit 1). The global --timeout bounds only connecting and
opening the directory.`,
		Example: `  chubbyfs registry watch web
  chubbyfs registry watch --count 1 --json web | jq -r '.instances[].addr'`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := registryArgs("registry watch", *dir, args, 1)
			if err != nil {
				return err
			}
			if count < 0 {
				return usagef("registry watch: --count must not be negative")
			}
			return a.watchRegistry(cmd.Context(), *dir, args[0], p, count, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a line instead of text (default: text)")
	cmd.Flags().IntVar(&count, "count", 0, "exit after this many lines (0: run until Ctrl-C)")
	return cmd
}

// watchRegistry prints service name's set at each change (p is its
// directory, for messages).
func (a *app) watchRegistry(ctx context.Context, dir, name, p string, count int, asJSON bool) error {
	return a.withLongSession(ctx, "registry watch", p, func(ctx, setupCtx context.Context, s *client.Session) error {
		r, err := recipe.NewRegistry(s, dir)
		if err != nil {
			return refused("registry watch", p, err)
		}
		w, err := r.Watch(setupCtx, name)
		if err != nil {
			return refused("registry watch", p, err)
		}
		fmt.Fprintf(a.stderr, "chubbyfs: watching %s; Ctrl-C to stop\n", p)
		return a.printChanges(ctx, s, w, p, count, asJSON)
	})
}

// printChanges prints w's changes until ctx ends, count lines, the
// directory goes, or the session does.
func (a *app) printChanges(ctx context.Context, s *client.Session, w *recipe.RegistryWatcher, p string, count int, asJSON bool) error {
	for printed := 0; count == 0 || printed < count; printed++ {
		ch, err := w.Next(ctx)
		switch {
		case ctx.Err() != nil, errors.Is(err, recipe.ErrRegistryGone):
			return nil
		case err != nil && s.Err() != nil:
			return sessionLost("registry watch", p, s)
		case err != nil:
			return refused("registry watch", p, err)
		}
		if asJSON {
			_ = json.NewEncoder(a.stdout).Encode(changeJSON{Instances: toInstancesJSON(ch.Instances),
				Added: ch.Added, Removed: ch.Removed, Modified: ch.Modified})
		} else {
			fmt.Fprintln(a.stdout, changeText(ch))
		}
	}
	return nil
}

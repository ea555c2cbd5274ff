package main

import (
	"context"
	"path"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// completeTimeout bounds one completion's look at the cell: a TAB that
// hangs is worse than one that offers nothing.
const completeTimeout = 3 * time.Second

// addPathCompletion makes every command under c whose Use names a PATH
// complete it from the cell (the one --cell or $CHUBBY_CELL names): the
// children of the directory typed so far. Arguments after PATH complete
// as files where the command runs a COMMAND (lock, election campaign),
// else not at all.
func (a *app) addPathCompletion(c *cobra.Command) {
	for _, sub := range c.Commands() {
		a.addPathCompletion(sub)
	}
	if c.ValidArgsFunction != nil || !strings.Contains(c.Use, "PATH") {
		return
	}
	runsCommand := strings.Contains(c.Use, "COMMAND")
	c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			if runsCommand {
				return nil, cobra.ShellCompDirectiveDefault
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.completePath(cmd.Context(), toComplete)
	}
}

// completePath lists the children of the directory in toComplete (an
// absolute path typed so far: "/a/b" lists /a for names starting with
// b) as paths, directories with a trailing "/" so that TAB goes on into
// them. Any failure offers nothing.
func (a *app) completePath(ctx context.Context, toComplete string) ([]string, cobra.ShellCompDirective) {
	none := cobra.ShellCompDirectiveNoFileComp
	if !strings.HasPrefix(toComplete, "/") {
		toComplete = "/" + toComplete // paths are absolute
	}
	i := strings.LastIndex(toComplete, "/")
	dir, prefix := path.Clean(toComplete[:i+1]), toComplete[i+1:]
	if client.ValidatePath(dir) != nil {
		return nil, none
	}
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	var out []string
	anyDir := false
	err := a.withSession(ctx, "complete", dir, func(s *client.Session) error {
		h, err := s.Open(ctx, dir, client.OpenOptions{})
		if err != nil {
			return err
		}
		entries, err := h.ReadDir(ctx)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.GetName(), prefix) {
				continue
			}
			p := path.Join(dir, e.GetName())
			if e.GetStat().GetKind() == chubby.NodeKind_DIRECTORY {
				p += "/"
				anyDir = true
			}
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, none
	}
	if anyDir {
		return out, none | cobra.ShellCompDirectiveNoSpace
	}
	return out, none
}

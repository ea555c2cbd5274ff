package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/client/recipe"
)

func (a *app) counterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "counter",
		Short: "hand out unique ids",
		Long: `counter hands out ids that no other caller of the cell gets, in one of two
ways (recipe.SequenceIDs, recipe.CASCounter):

  next PATH        the next number of directory PATH's sequential-name
                   counter plus one: from 1, increasing, never
                   repeated, not dense
  next --cas PATH  the file PATH's number plus one, written by
                   compare-and-set: 1, 2, 3, ... without gaps`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("counter needs a sub-command: next")
		},
	}
	cmd.AddCommand(a.counterNextCommand())
	return cmd
}

func (a *app) counterNextCommand() *cobra.Command {
	var cas, asJSON bool
	cmd := &cobra.Command{
		Use:   "next [--cas] [--json] PATH",
		Short: "print a new unique id",
		Long: `next prints a new id, a decimal number, that no other caller gets.

Without --cas, PATH is a directory (made, with its parents, if missing):
next creates a file PATH/id- with a sequential name, takes the number the
cell appended (the directory's counter, from 0, only growing: every
sequential name made in PATH takes one), deletes the file and prints that
number plus one: 1, 2, ... so that both kinds of id start at 1 (and 0 is
never an id).

With --cas, PATH is a counter file (made holding 0 if missing; its parent
directory must exist) holding a decimal number: next adds 1 by
compare-and-set on the file's content generation, retrying when another
caller added first, and prints the new value: 1, 2, 3, ... with no gaps
(unless a call fails midway).

Either count starts again from 1 if PATH is deleted. With --json it prints
one JSON object instead, for scripts: {"path", "id"}.`,
		Example: `  chubbyfs counter next /ids/jobs
  chubbyfs counter next --cas /ids/build-number`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			if p == "/" {
				return usagef("counter next: PATH must not be /")
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "counter next", p, func(s *client.Session) error {
				var next func() (int64, error)
				if cas {
					c, err := recipe.NewCASCounter(s, p)
					if err != nil {
						return refused("counter next", p, err)
					}
					next = func() (int64, error) { return c.Next(ctx) }
				} else {
					q, err := recipe.NewSequenceIDs(s, p, recipe.SequenceOptions{})
					if err != nil {
						return refused("counter next", p, err)
					}
					next = func() (int64, error) { return q.Next(ctx) }
				}
				id, err := next()
				if err != nil {
					return refused("counter next", p, err)
				}
				if asJSON {
					return a.writeJSON(counterJSON{Path: p, ID: id})
				}
				fmt.Fprintln(a.stdout, id)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&cas, "cas", false, "PATH is a counter file, added to by compare-and-set: dense ids (default: PATH is a directory, ids from its sequential names)")
	jsonFlag(cmd, &asJSON, "one JSON object")
	return cmd
}

// counterJSON is counter next --json's output.
type counterJSON struct {
	Path string `json:"path"`
	ID   int64  `json:"id"`
}

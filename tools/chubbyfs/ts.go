package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
)

func (a *app) tsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ts [--json] [N]",
		Short: "print N timestamps from the cell's oracle (default 1)",
		Long: `ts asks the cell's timestamp oracle for N strictly increasing timestamps
(1..1000000, default 1) and prints them one per line. Each is larger than
every timestamp the cell handed out before the command started, to anyone,
across failovers and restarts; none is handed out twice. They are counters,
not clock readings. They are consecutive: first, first+1, ... first+N-1.
With --json it prints one JSON object instead, for scripts: {"first",
"last", "count"}. It needs no session.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			n := 1
			switch len(args) {
			case 0:
			case 1:
				var err error
				if n, err = strconv.Atoi(args[0]); err != nil || n < 1 || n > 1_000_000 {
					return usagef("ts: N must be a number in 1..1000000, not %q", args[0])
				}
			default:
				return usagef("ts takes at most one argument, N")
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				first, err := c.Timestamps(ctx, n)
				if err != nil {
					return refused("ts", "", err)
				}
				if asJSON {
					return a.writeJSON(tsJSON{First: first, Last: first + int64(n) - 1, Count: n})
				}
				w := bufio.NewWriter(a.stdout)
				for i := range int64(n) {
					fmt.Fprintln(w, first+i)
				}
				return w.Flush()
			})
		},
	}
	jsonFlag(cmd, &asJSON, "one JSON object: the first and last timestamp and their count")
	return cmd
}

// tsJSON is ts --json's output: the timestamps first..last.
type tsJSON struct {
	First int64 `json:"first"`
	Last  int64 `json:"last"`
	Count int   `json:"count"`
}

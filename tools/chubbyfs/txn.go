package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

func (a *app) txnCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "txn [--json] < SCRIPT",
		Short: "check conditions, then apply creates, writes and deletes, all or nothing",
		Long: `txn reads a small script from standard input and sends it to the cell as
one atomic multi-operation: if every condition holds, every change is
applied, in order; otherwise nothing is. One statement per line ("#" starts
a comment; CONTENT is the rest of the line):

  if exists PATH
  if not-exists PATH
  if generation PATH N       the file's content generation is N
  if instance PATH N         the node is still instance N
  create PATH [CONTENT]      a new file (ephemeral PATH ... for one owned by the session)
  ephemeral PATH [CONTENT]
  mkdir PATH
  write PATH [CONTENT]
  write-if PATH N [CONTENT]  only if the content generation is N
  delete PATH
  delete-recursive PATH

Exit 0: applied (one line per change: the path and its new content
generation); 1: a condition did not hold (it names the line) or the cell
refused a change (nothing was applied either way); 2: a bad script.

With --json, an applied txn prints one JSON object instead, for scripts:
{"changes": [{"op" (create, mkdir, write, delete, ...), "path",
"content_generation"}]}, in the script's order; failures are reported on
standard error as without it.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usagef("txn takes no arguments: the script comes on standard input")
			}
			cmps, ops, lines, err := parseTxn(a.stdin)
			if err != nil {
				return usagef("txn: %v", err)
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "txn", "", func(s *client.Session) error {
				r, err := s.Multi(ctx, cmps, ops)
				if err != nil {
					return refused("txn", "", err)
				}
				if !r.Succeeded {
					return &exitError{code: exitRefused, msg: fmt.Sprintf("txn: condition on line %d does not hold: %s (nothing applied)",
						lines[r.FailedCompare], describeCmp(cmps[r.FailedCompare]))}
				}
				if asJSON {
					out := txnJSON{Changes: []txnChangeJSON{}}
					for i, op := range ops {
						out.Changes = append(out.Changes, txnChangeJSON{Op: strings.ToLower(op.Kind.String()), Path: op.Path,
							ContentGeneration: r.Stats[i].GetContentGeneration()})
					}
					return a.writeJSON(out)
				}
				for i, op := range ops {
					fmt.Fprintf(a.stdout, "%s %s generation=%d\n", strings.ToLower(op.Kind.String()), op.Path, r.Stats[i].GetContentGeneration())
				}
				return nil
			})
		},
	}
	jsonFlag(cmd, &asJSON, "one JSON object")
	return cmd
}

// txnJSON is txn --json's output: the changes applied.
type txnJSON struct {
	Changes []txnChangeJSON `json:"changes"`
}

type txnChangeJSON struct {
	Op                string `json:"op"`
	Path              string `json:"path"`
	ContentGeneration int64  `json:"content_generation"`
}

// parseTxn reads a txn script: its compares, its ops, and the line of each
// compare.
func parseTxn(r io.Reader) ([]client.Cmp, []client.Op, []int, error) {
	var cmps []client.Cmp
	var ops []client.Op
	var lines []int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), int(chubby.MAX_CONTENT_BYTES)+1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c, op, err := parseTxnLine(line)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("line %d: %w", n, err)
		}
		if c != nil {
			if len(ops) > 0 {
				return nil, nil, nil, fmt.Errorf("line %d: conditions come before the changes", n)
			}
			cmps, lines = append(cmps, c), append(lines, n)
		} else {
			ops = append(ops, op)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, nil, err
	}
	if len(ops) == 0 {
		return nil, nil, nil, fmt.Errorf("the script has no change")
	}
	return cmps, ops, lines, nil
}

// parseTxnLine parses one statement: a compare or an op.
func parseTxnLine(line string) (client.Cmp, client.Op, error) {
	word, rest := cut(line)
	if word == "if" {
		kind, rest := cut(rest)
		path, rest := cut(rest)
		if path == "" {
			return nil, nil, fmt.Errorf("%q needs a path", "if "+kind)
		}
		switch kind {
		case "exists", "not-exists":
			if rest != "" {
				return nil, nil, fmt.Errorf("unexpected %q", rest)
			}
			if kind == "exists" {
				return client.CmpExists(path), nil, nil
			}
			return client.CmpNotExists(path), nil, nil
		case "generation", "instance":
			v, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("%q needs a number after the path", "if "+kind)
			}
			if kind == "generation" {
				return client.CmpGeneration(path, v), nil, nil
			}
			return client.CmpInstance(path, v), nil, nil
		}
		return nil, nil, fmt.Errorf("unknown condition %q", kind)
	}
	path, content := cut(rest)
	if path == "" {
		return nil, nil, fmt.Errorf("%q needs a path", word)
	}
	switch word {
	case "create":
		return nil, client.OpCreate(path, []byte(content)), nil
	case "ephemeral":
		return nil, client.OpCreateEphemeral(path, []byte(content)), nil
	case "write":
		return nil, client.OpSet(path, []byte(content)), nil
	case "write-if":
		g, content := cut(content)
		gen, err := strconv.ParseInt(g, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("write-if needs a generation after the path")
		}
		return nil, client.OpSetIf(path, []byte(content), gen), nil
	}
	if content != "" {
		return nil, nil, fmt.Errorf("unexpected %q after %s %s", content, word, path)
	}
	switch word {
	case "mkdir":
		return nil, client.OpMkdir(path), nil
	case "delete":
		return nil, client.OpDelete(path, false), nil
	case "delete-recursive":
		return nil, client.OpDelete(path, true), nil
	}
	return nil, nil, fmt.Errorf("unknown statement %q", word)
}

// cut splits off the first blank-separated word.
func cut(s string) (string, string) {
	w, rest, _ := strings.Cut(strings.TrimSpace(s), " ")
	return w, strings.TrimSpace(rest)
}

func describeCmp(c client.Cmp) string {
	switch c.Kind {
	case chubby.CompareKind_EXISTS:
		return "exists " + c.Path
	case chubby.CompareKind_NOT_EXISTS:
		return "not-exists " + c.Path
	case chubby.CompareKind_CONTENT_GENERATION:
		return fmt.Sprintf("generation %s %d", c.Path, c.GetValue())
	default:
		return fmt.Sprintf("instance %s %d", c.Path, c.GetValue())
	}
}

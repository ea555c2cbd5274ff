package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
)

func (a *app) whoamiCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "whoami [--json]",
		Short: "show the principal the cell takes this client for",
		Long: `whoami prints the principal every ACL check of this client's sessions
uses — the common name of its certificate (--tls-cert or $CHUBBY_TLS_CERT),
or "anonymous" without one — and whether the connection is TLS. With
--json it prints one JSON object instead, for scripts: {"principal",
"tls"}.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usagef("whoami takes no arguments")
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				id, err := c.WhoAmI(ctx)
				if err != nil {
					return refused("whoami", "", err)
				}
				if asJSON {
					return a.writeJSON(whoamiJSON{Principal: id.Principal, TLS: id.TLS})
				}
				link := "plaintext (the cell runs without TLS)"
				if id.TLS {
					link = "mutual TLS"
				}
				fmt.Fprintf(a.stdout, "%s\t%s\n", id.Principal, link)
				return nil
			})
		},
	}
	jsonFlag(cmd, &asJSON, "one JSON object")
	return cmd
}

// whoamiJSON is whoami --json's output.
type whoamiJSON struct {
	Principal string `json:"principal"`
	TLS       bool   `json:"tls"`
}

func (a *app) aclCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl get|set PATH",
		Short: "show or change a node's ACL names",
		Long: `Every node names three ACL files in /acl: read, write and change_acl. An
ACL file lists principals, one per line ("*": every principal with a
certificate; "anonymous": clients without one; "#" starts a comment). An
empty name grants the right to everybody; a name whose file is missing
grants it to nobody. New nodes get their parent's names.

  chubbyfs acl get /team-a
  chubbyfs write /acl/team-a <<< 'alice'
  chubbyfs acl set /team-a --write team-a --change-acl admin`,
		Args:              anyArgs,
		ValidArgsFunction: cobra.NoFileCompletions, // get or set: no PATH here
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("acl needs get or set")
		},
	}
	cmd.AddCommand(a.aclGetCommand(), a.aclSetCommand())
	return cmd
}

func (a *app) aclGetCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get [--json] PATH",
		Short: "print a node's ACL names and acl_generation",
		Long: `acl get prints the ACL names of the node at PATH (read, write,
change_acl) and its acl_generation. With --json it prints one JSON object
instead, for scripts: ` + aclJSONHelp + `.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "acl get", p, func(s *client.Session) error {
				h, err := s.Open(ctx, p, client.OpenOptions{})
				if err != nil {
					return refused("acl get", p, err)
				}
				st := h.Stat() // as Open found it: no second call
				if asJSON {
					return a.writeJSON(toACLJSON(p, st))
				}
				acl := client.ACLOf(st)
				fmt.Fprintf(a.stdout, "read:           %s\nwrite:          %s\nchange_acl:     %s\nacl_generation: %d\n",
					aclName(acl.Read), aclName(acl.Write), aclName(acl.ChangeACL), st.GetAclGeneration())
				return nil
			})
		},
	}
	jsonFlag(cmd, &asJSON, "one JSON object")
	return cmd
}

// aclJSONHelp is the shape of aclJSON, for --help texts.
const aclJSONHelp = `{"path", "read", "write", "change_acl" (each an ACL file
name in /acl; "": everybody), "acl_generation"}`

// aclName shows an ACL name, or what an empty one means.
func aclName(n string) string {
	if n == "" {
		return "(none: everybody)"
	}
	return n + "\t(/acl/" + n + ")"
}

func (a *app) aclSetCommand() *cobra.Command {
	var read, write, change string
	var ifGen int64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "set PATH [--read NAME] [--write NAME] [--change-acl NAME] [--if-generation G] [--json]",
		Short: "change a node's ACL names (the others stay)",
		Long: `acl set replaces the ACL names given and keeps the others. It needs the
node's change_acl right. --if-generation makes it a compare-and-swap on the
node's acl_generation. Give a name as "" to grant a right to everybody.
It prints the new acl_generation; with --json, one JSON object with the
node's names as set, as acl get --json does: ` + aclJSONHelp + `.`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pathArg(cmd, args)
			if err != nil {
				return err
			}
			fl := cmd.Flags()
			if !fl.Changed("read") && !fl.Changed("write") && !fl.Changed("change-acl") {
				return usagef("acl set needs --read, --write or --change-acl")
			}
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			return a.withSession(ctx, "acl set", p, func(s *client.Session) error {
				h, err := s.Open(ctx, p, client.OpenOptions{})
				if err != nil {
					return refused("acl set", p, err)
				}
				st := h.Stat() // as Open found it: no second call
				acl := client.ACLOf(st)
				for _, f := range []struct {
					flag string
					v    string
					dst  *string
				}{{"read", read, &acl.Read}, {"write", write, &acl.Write}, {"change-acl", change, &acl.ChangeACL}} {
					if fl.Changed(f.flag) {
						*f.dst = f.v
					}
				}
				var opts []client.SetOption
				if fl.Changed("if-generation") {
					opts = append(opts, client.IfGeneration(ifGen))
				}
				st, err = h.SetACL(ctx, acl, opts...)
				if err != nil {
					return refused("acl set", p, err)
				}
				if asJSON {
					return a.writeJSON(aclJSON{Path: p, Read: acl.Read, Write: acl.Write, ChangeACL: acl.ChangeACL,
						ACLGeneration: st.GetAclGeneration()})
				}
				fmt.Fprintf(a.stdout, "acl_generation: %d\n", st.GetAclGeneration())
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&read, "read", "", "ACL file name for the read right")
	cmd.Flags().StringVar(&write, "write", "", "ACL file name for the write right")
	cmd.Flags().StringVar(&change, "change-acl", "", "ACL file name for the change_acl right")
	cmd.Flags().Int64Var(&ifGen, "if-generation", 0, "only if the node's acl_generation is still this")
	jsonFlag(cmd, &asJSON, "one JSON object")
	return cmd
}

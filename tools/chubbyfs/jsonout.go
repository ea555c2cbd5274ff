package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Every command that prints has --json: one JSON value on standard output
// (a JSON object, an array, or one object a line for the commands that
// run until stopped), its shape documented in the command's --help.
// Errors still go to standard error as text, with the same exit status.

// jsonFlag adds --json to cmd, setting *v.
func jsonFlag(cmd *cobra.Command, v *bool, what string) {
	cmd.Flags().BoolVar(v, "json", false, "print "+what+" instead of text (default: text)")
}

// writeJSON prints v as one line of JSON.
func (a *app) writeJSON(v any) error {
	if err := json.NewEncoder(a.stdout).Encode(v); err != nil {
		return &exitError{code: exitRefused, msg: fmt.Sprintf("writing output: %v", err)}
	}
	return nil
}

// statJSON is stat --json's output, and each entry of ls --json.
type statJSON struct {
	Path              string    `json:"path"`
	Kind              string    `json:"kind"` // file or directory
	Instance          int64     `json:"instance"`
	ContentGeneration int64     `json:"content_generation"`
	LockGeneration    int64     `json:"lock_generation"`
	ACLGeneration     int64     `json:"acl_generation"`
	Checksum          uint32    `json:"checksum"`
	Size              int64     `json:"size"` // bytes; a directory's number of children
	CreateTimeMs      int64     `json:"create_time_ms"`
	ModifyTimeMs      int64     `json:"modify_time_ms"`
	Ephemeral         bool      `json:"ephemeral"`
	EphemeralOwner    int64     `json:"ephemeral_owner"`
	Lock              lockState `json:"lock"`
}

// statJSONHelp is the shape of statJSON, for --help texts.
const statJSONHelp = `{"path", "kind" ("file" or
"directory"), "instance", "content_generation", "lock_generation",
"acl_generation", "checksum" (a number), "size", "create_time_ms",
"modify_time_ms" (milliseconds since 1970, UTC), "ephemeral",
"ephemeral_owner", "lock": {"path", "mode" (free, exclusive, shared),
"holders", "lock_generation", "waiters", "delay_remaining_ms"}}`

func toStatJSON(p string, st *chubby.Stat) statJSON {
	kind := "file"
	if st.GetKind() == chubby.NodeKind_DIRECTORY {
		kind = "directory"
	}
	return statJSON{
		Path: p, Kind: kind, Instance: st.GetInstance(),
		ContentGeneration: st.GetContentGeneration(), LockGeneration: st.GetLockGeneration(), ACLGeneration: st.GetAclGeneration(),
		Checksum: uint32(st.GetChecksum()), Size: st.GetSize(),
		CreateTimeMs: st.GetCreateTimeMs(), ModifyTimeMs: st.GetModifyTimeMs(),
		Ephemeral: st.GetEphemeral(), EphemeralOwner: st.GetEphemeralOwner(),
		Lock: toLockState(p, st),
	}
}

// lsEntryJSON is one entry of ls --json: the child's name and its stat.
type lsEntryJSON struct {
	Name string `json:"name"`
	statJSON
}

// catJSON is cat --json's output. Content is bytes: Data holds it as a
// string when it is valid UTF-8 (UTF8 true), else as standard base64
// (UTF8 false).
type catJSON struct {
	Path              string `json:"path"`
	ContentGeneration int64  `json:"content_generation"`
	Size              int    `json:"size"`
	UTF8              bool   `json:"utf8"`
	Data              string `json:"data"`
}

func toCatJSON(p string, data []byte, st *chubby.Stat) catJSON {
	out := catJSON{Path: p, ContentGeneration: st.GetContentGeneration(), Size: len(data), UTF8: utf8.Valid(data)}
	if out.UTF8 {
		out.Data = string(data)
	} else {
		out.Data = base64.StdEncoding.EncodeToString(data)
	}
	return out
}

// aclJSON is acl get --json's and acl set --json's output. An empty name
// grants the right to everybody.
type aclJSON struct {
	Path          string `json:"path"`
	Read          string `json:"read"`
	Write         string `json:"write"`
	ChangeACL     string `json:"change_acl"`
	ACLGeneration int64  `json:"acl_generation"`
}

func toACLJSON(p string, st *chubby.Stat) aclJSON {
	acl := client.ACLOf(st)
	return aclJSON{Path: p, Read: acl.Read, Write: acl.Write, ChangeACL: acl.ChangeACL, ACLGeneration: st.GetAclGeneration()}
}

// Package version is the one source of the Chubby binaries' version: the
// release number the cell reports in GetStatus (chubbyfs status shows it)
// and the line chubbyd --version and chubbyfs --version print, with the
// commit and Go version the binary was built from.
package version

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// Number is this source tree's release number.
const Number = "0.1.0"

// commit and modified stand in for vcs.revision and vcs.modified when the
// go command recorded none (it records none with -buildvcs=false, and
// none in a git worktree): build.sh sets them with
//
//	-ldflags "-X github.com/chubbygo/chubby/cell/version.commit=REV -X github.com/chubbygo/chubby/cell/version.modified=true|false"
var commit, modified string

// Info describes the running binary.
type Info struct {
	// Version is "v" + Number.
	Version string
	// Module is the main module's version as the go command stamped it:
	// a release tag, a pseudo-version, or "(devel)"; "" without build
	// information.
	Module string
	// Commit is the VCS revision the binary was built from, "" when the
	// build did not record one (go test, -buildvcs=false or a git worktree
	// without build.sh's -ldflags, no checkout).
	Commit string
	// Modified says the checkout had uncommitted changes.
	Modified bool
	// GoVersion is the Go release that built the binary.
	GoVersion string
}

// Read returns the running binary's Info.
func Read() Info {
	info := Info{Version: "v" + Number, GoVersion: runtime.Version(), Commit: commit, Modified: modified == "true"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.Module = bi.Main.Version
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// pseudo matches a pseudo-version's timestamp and commit, as in
// v0.0.0-20261204010203-f9f741e12345.
var pseudo = regexp.MustCompile(`-(\d+\.)?\d{14}-[0-9a-f]{12}`)

// Line is the one line --version prints for program, e.g.
//
//	chubbyfs v0.1.0 (commit f9f741e12345, modified) go1.26.8
//
// The commit is shortened to 12 digits, "unknown" when not recorded; a
// module version that is a release tag other than Version is added as
// "module vX.Y.Z" (a pseudo-version only repeats the commit).
func (i Info) Line(program string) string {
	var parts []string
	if m := strings.TrimSuffix(i.Module, "+dirty"); m != "" && m != "(devel)" && m != i.Version && !pseudo.MatchString(m) {
		parts = append(parts, "module "+i.Module)
	}
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	} else if len(commit) > 12 {
		commit = commit[:12]
	}
	parts = append(parts, "commit "+commit)
	if i.Modified {
		parts = append(parts, "modified")
	}
	return program + " " + i.Version + " (" + strings.Join(parts, ", ") + ") " + i.GoVersion
}

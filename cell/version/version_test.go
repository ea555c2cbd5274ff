package version

import (
	"runtime"
	"testing"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct {
		info Info
		want string
	}{
		{Info{Version: "v0.1.0", GoVersion: "go1.26.8"}, "chubbyfs v0.1.0 (commit unknown) go1.26.8"},
		{Info{Version: "v0.1.0", Module: "(devel)", Commit: "f9f741e8d95e1c6b7f967d28a3455275897e0462", GoVersion: "go1.26.8"},
			"chubbyfs v0.1.0 (commit f9f741e8d95e) go1.26.8"},
		{Info{Version: "v0.1.0", Module: "v0.0.0-20261204010203-f9f741e8d95e+dirty", Commit: "f9f741e8d95e1c6b", Modified: true, GoVersion: "go1.26.8"},
			"chubbyfs v0.1.0 (commit f9f741e8d95e, modified) go1.26.8"},
		{Info{Version: "v0.1.0", Module: "v0.1.0", Commit: "abc", GoVersion: "go1.26.8"}, "chubbyfs v0.1.0 (commit abc) go1.26.8"},
		{Info{Version: "v0.1.0", Module: "v0.2.0-rc.1", Commit: "abc", GoVersion: "go1.26.8"},
			"chubbyfs v0.1.0 (module v0.2.0-rc.1, commit abc) go1.26.8"},
	} {
		if got := tc.info.Line("chubbyfs"); got != tc.want {
			t.Errorf("%+v.Line = %q, want %q", tc.info, got, tc.want)
		}
	}
}

// TestRead: a test binary has build information but no VCS stamp.
func TestRead(t *testing.T) {
	i := Read()
	if i.Version != "v"+Number || i.GoVersion != runtime.Version() || i.Module == "" {
		t.Errorf("Read() = %+v", i)
	}
}

// TestReadLinkerCommit: build.sh's -ldflags commit stands in for the VCS
// stamp a test binary (like a worktree build) lacks.
func TestReadLinkerCommit(t *testing.T) {
	saved, savedMod := commit, modified
	t.Cleanup(func() { commit, modified = saved, savedMod })
	commit, modified = "0123456789abcdef0123", "true"
	if i := Read(); i.Commit != commit || !i.Modified {
		t.Errorf("Read() = %+v, want commit %s, modified", i, commit)
	}
	if l := Read().Line("chubbyd"); l != "chubbyd v"+Number+" (commit 0123456789ab, modified) "+runtime.Version() {
		t.Errorf("Line = %q", l)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeBlock returns the body of the README's first fenced block of the
// given language that contains marker.
func readmeBlock(t *testing.T, lang, marker string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var in bool
	var cur []string
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case !in && line == "```"+lang:
			in, cur = true, nil
		case in && line == "```":
			in = false
			if body := strings.Join(cur, "\n"); strings.Contains(body, marker) {
				return body + "\n"
			}
		case in:
			cur = append(cur, line)
		}
	}
	t.Fatalf("README: no ```%s block with %q", lang, marker)
	return ""
}

// TestREADMESystemdUnit: the README's systemd unit passes systemd-analyze
// verify with chubbyd where the README installs it (the test puts a build
// at a path of its own in the unit's ExecStart instead of writing to
// /usr/local/bin), and the README creates the user the unit names.
func TestREADMESystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	const installed = "/usr/local/bin/chubbyd"
	unit := readmeBlock(t, "ini", "ExecStart="+installed+" ")
	install := readmeBlock(t, "sh", installed)
	if !strings.Contains(install, "useradd --system") || !strings.Contains(unit, "\nUser=chubby\n") ||
		!strings.Contains(install, " chubby\n") {
		t.Fatalf("the README's install steps do not create the unit's user:\n%s\n%s", install, unit)
	}
	bin := buildChubbyd(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "chubbyd.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, installed, bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify of the README's unit: %v\n%s", err, out)
	}
	// The flags the unit gives are chubbyd serve's.
	help, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("chubbyd serve --help: %v\n%s", err, help)
	}
	cmdline := strings.SplitN(strings.SplitN(unit, "ExecStart=", 2)[1], "\nUser=", 2)[0]
	for _, a := range strings.Fields(strings.ReplaceAll(cmdline, "\\\n", " ")) {
		if strings.HasPrefix(a, "--") && !strings.Contains(string(help), "      "+a+" ") {
			t.Errorf("chubbyd serve has no flag %s (in the README's unit)", a)
		}
	}
}

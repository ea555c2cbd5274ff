// Package readmetest runs the README's examples. Every fenced block of
// the README is marked on the line before it, in an HTML comment the
// rendered page does not show:
//
//	<!-- readme: run -->             run it (a sh block) against a fresh cell
//	<!-- readme: skip: REASON -->    do not: REASON says why, and where it is
//	                                 run instead when it is
//
// An unmarked block fails the test, so a new example is either run or
// says why not. The runnable blocks run in the order of the README, each
// with bash -euo pipefail in one working directory (files one block makes
// are there for the next), with bin/chubbyd and bin/chubbyfs built from
// this tree (also on PATH, for blocks that say chubbyfs), against one
// cell that bin/chubbyd dev starts, as the README's first command does:
// its address stands in for the dev cell's 127.0.0.1:7000. Processes a
// block leaves in the background are killed when it ends.
package readmetest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// block is one fenced block of the README.
type block struct {
	line int    // of its opening fence, from 1
	lang string // after the fence: sh, go, ...; "" for none
	mark string // "run", "skip: reason", or "" when unmarked
	body string
}

var markRE = regexp.MustCompile(`^<!-- readme: (run|skip: \S.*) -->$`)

// parse returns the fenced blocks of a Markdown text with their marks.
func parse(text string) ([]block, error) {
	var out []block
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "```") {
			continue
		}
		b := block{line: i + 1, lang: strings.TrimPrefix(l, "```")}
		for j := i - 1; j >= 0; j-- {
			if p := strings.TrimSpace(lines[j]); p != "" {
				if m := markRE.FindStringSubmatch(p); m != nil {
					b.mark = m[1]
				}
				break
			}
		}
		var body []string
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("line %d: block not closed", b.line)
		}
		b.body = strings.Join(body, "\n") + "\n"
		out = append(out, b)
	}
	return out, nil
}

func TestParse(t *testing.T) {
	blocks, err := parse("text\n<!-- readme: run -->\n```sh\necho hi\n```\n\n```go\nx\n```\n<!-- readme: skip: a diagram -->\n\n```\n+--+\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []block{{3, "sh", "run", "echo hi\n"}, {7, "go", "", "x\n"}, {12, "", "skip: a diagram", "+--+\n"}}
	if fmt.Sprint(blocks) != fmt.Sprint(want) {
		t.Fatalf("parse: %+v\nwant %+v", blocks, want)
	}
	if _, err := parse("```sh\nopen\n"); err == nil {
		t.Fatal("an unclosed block parsed")
	}
}

// TestREADME runs the README's runnable blocks, in order, against a fresh
// cell, and fails on any unmarked block.
func TestREADME(t *testing.T) {
	text, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := parse(string(text))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	var run []block
	for _, b := range blocks {
		switch {
		case b.mark == "":
			t.Errorf("README.md:%d: a ```%s block without <!-- readme: run --> or <!-- readme: skip: REASON --> before it", b.line, b.lang)
		case b.mark == "run" && b.lang != "sh":
			t.Errorf("README.md:%d: a ```%s block marked run: only sh blocks run here (say skip and where it runs)", b.line, b.lang)
		case b.mark == "run":
			run = append(run, b)
		}
	}
	if t.Failed() || testing.Short() {
		return
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	out, err := exec.Command("go", "build", "-o", bin+"/", "github.com/chubbygo/chubby/tools/chubbyd", "github.com/chubbygo/chubby/tools/chubbyfs").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := startDevCell(t, bin, dir)
	env := append(os.Environ(), "CHUBBY_CELL="+addr, "PATH="+bin+":"+os.Getenv("PATH"))
	for _, b := range run {
		script := strings.ReplaceAll(b.body, "127.0.0.1:7000", addr)
		start := time.Now()
		out, err := runBlock(dir, env, script, 2*time.Minute)
		t.Logf("README.md:%d (%v):\n%s", b.line, time.Since(start).Round(time.Millisecond), out)
		if err != nil {
			t.Fatalf("README.md:%d: the example fails: %v\n%s", b.line, err, script)
		}
	}
	t.Logf("%d blocks run, %d skipped with their reasons", len(run), len(blocks)-len(run))
}

// startDevCell starts bin/chubbyd dev on a free port with its data in dir
// and waits (bounded) until chubbyfs status answers; the cell stops when
// the test ends.
func startDevCell(t *testing.T, bin, dir string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs bytes.Buffer
	cmd := exec.Command(filepath.Join(bin, "chubbyd"), "dev", "--listen", addr, "--http", "", "--data", filepath.Join(dir, "chubby-data"), "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if exec.Command(filepath.Join(bin, "chubbyfs"), "--cell", addr, "status").Run() == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dev cell at %s did not answer within 60 s:\n%s", addr, logs.String())
		}
	}
}

// runBlock runs script with bash -euo pipefail in dir, at most limit, and
// then kills whatever it left running (its process group). The output
// goes to a file, not a pipe, so that a process left in the background
// does not hold Wait up.
func runBlock(dir string, env []string, script string, limit time.Duration) (string, error) {
	f, err := os.CreateTemp("", "readme-block-*.out")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err = cmd.Start(); err == nil {
		err = cmd.Wait()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	out, _ := os.ReadFile(f.Name())
	return string(out), err
}

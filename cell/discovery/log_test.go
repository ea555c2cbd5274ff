package discovery

import (
	"context"
	"log"
	"log/slog"
	"slices"
	"sync"
	"testing"
)

func TestParseLogLine(t *testing.T) {
	for _, tc := range []struct {
		line  string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:1", slog.LevelDebug, "Stream connection from=127.0.0.1:1"},
		{"[INFO] memberlist: Suspect 2-x has failed, no acks received", slog.LevelInfo, "Suspect 2-x has failed, no acks received"},
		{"[WARN] memberlist: Refuting a suspect message (from: 1-a)", slog.LevelWarn, "Refuting a suspect message (from: 1-a)"},
		{"[ERR] memberlist: Failed push/pull merge: boom", slog.LevelError, "Failed push/pull merge: boom"},
		{"[ERROR] memberlist: x", slog.LevelError, "x"},
		{"[ERR] Failed to shutdown transport: x", slog.LevelError, "Failed to shutdown transport: x"},
		{"Err: Could not set the deadline: x", slog.LevelError, "Could not set the deadline: x"},
		{"[NOTICE] something", slog.LevelInfo, "[NOTICE] something"},
		{"no level at all", slog.LevelInfo, "no level at all"},
	} {
		level, msg := parseLogLine(tc.line)
		if level != tc.level || msg != tc.msg {
			t.Errorf("parseLogLine(%q) = %v, %q; want %v, %q", tc.line, level, msg, tc.level, tc.msg)
		}
	}
}

// recorder is a slog.Handler that keeps the records it is given.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func TestLogWriter(t *testing.T) {
	rec := &recorder{}
	var suspects []string
	w := &logWriter{l: slog.New(rec), onSuspect: func(name string) { suspects = append(suspects, name) }}
	l := log.New(w, "", 0) // as memberlist is given it
	l.Printf("[INFO] memberlist: Suspect %s has failed, no acks received", "7-abc")
	l.Printf("[WARN] memberlist: Was able to connect to %s over TCP but UDP probes failed", "7-abc")
	if _, err := w.Write([]byte("[DEBUG] memberlist: one\n\n[ERR] memberlist: two\n")); err != nil {
		t.Fatal(err)
	}

	want := []struct {
		level slog.Level
		msg   string
	}{
		{slog.LevelInfo, "Suspect 7-abc has failed, no acks received"},
		{slog.LevelWarn, "Was able to connect to 7-abc over TCP but UDP probes failed"},
		{slog.LevelDebug, "one"},
		{slog.LevelError, "two"},
	}
	if len(rec.records) != len(want) {
		t.Fatalf("%d records; want %d", len(rec.records), len(want))
	}
	for i, w := range want {
		if r := rec.records[i]; r.Level != w.level || r.Message != w.msg {
			t.Errorf("record %d: %v %q; want %v %q", i, r.Level, r.Message, w.level, w.msg)
		}
	}
	if !slices.Equal(suspects, []string{"7-abc"}) {
		t.Errorf("suspects %q; want [7-abc]", suspects)
	}
}

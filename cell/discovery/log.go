package discovery

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
)

// logWriter is the output of memberlist's log.Logger: each line, of the
// form "[LEVEL] memberlist: message", becomes a slog record at the
// matching level. memberlist tells of the suspicions this node raises only
// in its log, so the writer also hands the name in "Suspect NAME has
// failed, no acks received" to onSuspect.
type logWriter struct {
	l         *slog.Logger
	onSuspect func(name string)
}

// Write takes one or more whole lines, as log.Logger writes them.
func (w *logWriter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		level, msg := parseLogLine(string(bytes.TrimRight(line, "\r\n")))
		if msg == "" {
			continue
		}
		if name, ok := suspectName(msg); ok && w.onSuspect != nil {
			w.onSuspect(name)
		}
		w.l.Log(context.Background(), level, msg)
	}
	return len(p), nil
}

// parseLogLine splits a memberlist log line into its level and message.
// memberlist writes "[DEBUG]", "[INFO]", "[WARN]", "[ERR]" and "[ERROR]",
// and a few lines start "Err:"; a line without a level is Info.
func parseLogLine(line string) (slog.Level, string) {
	level := slog.LevelInfo
	if rest, ok := strings.CutPrefix(line, "Err:"); ok {
		level, line = slog.LevelError, rest
	} else if tag, rest, ok := strings.Cut(line, "] "); ok && strings.HasPrefix(tag, "[") {
		if l, known := logLevel(tag[1:]); known {
			level, line = l, rest
		}
	}
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "memberlist: ")
	return level, line
}

func logLevel(tag string) (slog.Level, bool) {
	switch tag {
	case "TRACE":
		return slog.LevelDebug - 4, true
	case "DEBUG":
		return slog.LevelDebug, true
	case "INFO":
		return slog.LevelInfo, true
	case "WARN":
		return slog.LevelWarn, true
	case "ERR", "ERROR":
		return slog.LevelError, true
	}
	return 0, false
}

// suspectName returns the node name of memberlist's message for a failed
// probe (state.go, probeNode), logged just before the node is suspected.
func suspectName(msg string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, "Suspect ")
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, " has failed, no acks received")
	return name, ok && name != ""
}

package rpc

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
)

// fakeClock is a settable clock for the log limiter.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestLogLimiter(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := newLogLimiter(clock.now)

	allowed := 0
	for range 100 {
		if ok, dropped := r.allow("flood", 1); ok {
			allowed++
		} else if dropped != 0 {
			t.Fatalf("dropped reported mid-window: %d", dropped)
		}
	}
	if allowed != logBurst {
		t.Fatalf("%d of 100 repeats allowed in one window; want %d", allowed, logBurst)
	}
	if ok, _ := r.allow("other", 1); !ok {
		t.Fatal("a different message was refused")
	}

	clock.t = clock.t.Add(logWindow)
	ok, dropped := r.allow("flood", 1)
	if !ok || dropped != 100-logBurst {
		t.Fatalf("first message of a new window: ok=%v dropped=%d; want true, %d", ok, dropped, 100-logBurst)
	}
	if _, dropped := r.allow("flood", 1); dropped != 0 {
		t.Fatalf("dropped reported twice: %d", dropped)
	}
}

func TestLogLimiterBoundsKeys(t *testing.T) {
	r := newLogLimiter((&fakeClock{t: time.Unix(1000, 0)}).now)
	allowed := 0
	for i := range 10 * logMaxKeys {
		if ok, _ := r.allow(fmt.Sprint("distinct ", i), 1); ok {
			allowed++
		}
	}
	if len(r.counts) > logMaxKeys+1 {
		t.Fatalf("limiter tracks %d keys; want at most %d", len(r.counts), logMaxKeys+1)
	}
	if want := logMaxKeys + logBurst; allowed != want {
		t.Fatalf("%d distinct messages allowed; want %d (the tracked ones, then one shared budget)", allowed, want)
	}
}

func TestLogKey(t *testing.T) {
	tests := []struct{ a, b string }{
		{"NETPOLL: re-accept conn failed, err=[accept4: too many open files] and next retrytime=10ms",
			"NETPOLL: re-accept conn failed, err=[accept4: too many open files] and next retrytime=1000ms"},
		{"conn from 127.0.0.1:4242", "conn from 10.0.0.1:1"},
	}
	for _, tt := range tests {
		if logKey(tt.a) != logKey(tt.b) {
			t.Errorf("logKey(%q) = %q != logKey(%q) = %q", tt.a, logKey(tt.a), tt.b, logKey(tt.b))
		}
	}
	if logKey("accept failed") == logKey("dial failed") {
		t.Error("different messages share a key")
	}
	if long := logKey(strings.Repeat("x", 1000)); len(long) != logKeyLen {
		t.Errorf("key of a long message has %d bytes; want %d", len(long), logKeyLen)
	}
}

func TestLogWriter(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	std := log.New(NewLogWriter(l, "netpoll"), "", log.LstdFlags)
	for i := range 50 {
		std.Printf("NETPOLL: re-accept conn failed, next retrytime=%dms", i)
	}
	std.Printf("NETPOLL: something else")
	out := buf.String()
	if got := strings.Count(out, "re-accept conn failed"); got != logBurst {
		t.Fatalf("%d of 50 repeats written; want %d:\n%s", got, logBurst, out)
	}
	if !strings.Contains(out, "something else") || !strings.Contains(out, "component=netpoll") {
		t.Fatalf("missing message or component:\n%s", out)
	}
	if strings.Contains(out, time.Now().Format("2006/01/02")) {
		t.Fatalf("log.Logger timestamp kept:\n%s", out)
	}
}

func TestKitexLogger(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: levelTrace}))
	k := NewKitexLogger(l).(*kitexLogger)
	exits := 0
	k.exit = func() { exits++ }

	tests := []struct {
		log  func()
		want string
	}{
		{func() { k.Trace("a trace") }, "level=DEBUG-4 msg=\"a trace\""},
		{func() { k.Debugf("debug %d", 1) }, "level=DEBUG msg=\"debug 1\""},
		{func() { k.CtxInfof(context.Background(), "info %s", "x") }, "level=INFO msg=\"info x\""},
		{func() { k.Notice("notice") }, "level=INFO+2 msg=notice"},
		{func() { k.Warnf("warn") }, "level=WARN msg=warn"},
		{func() { k.CtxErrorf(context.Background(), "error %v", 2) }, "level=ERROR msg=\"error 2\""},
		{func() { k.Fatal("fatal") }, "level=ERROR+4 msg=fatal"},
	}
	for _, tt := range tests {
		buf.Reset()
		tt.log()
		if !strings.Contains(buf.String(), tt.want) || !strings.Contains(buf.String(), "component=kitex") {
			t.Errorf("logged %q; want it to contain %q and component=kitex", buf.String(), tt.want)
		}
	}
	if exits != 1 {
		t.Errorf("Fatal exited %d times; want 1", exits)
	}

	buf.Reset()
	k.SetLevel(klog.LevelWarn)
	k.Info("hidden")
	k.Warn("shown")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, "shown") {
		t.Errorf("after SetLevel(Warn) logged %q", out)
	}

	// Repeats of one format are limited, whatever their arguments.
	buf.Reset()
	for i := range 100 {
		k.Errorf("accept failed: fd %d", i)
	}
	if got := strings.Count(buf.String(), "accept failed"); got != logBurst {
		t.Errorf("%d of 100 repeats written; want %d", got, logBurst)
	}

	// gonet's report of a caller that hung up before its first request
	// (a replica's liveness check) is no error.
	buf.Reset()
	k.SetLevel(klog.LevelTrace)
	k.CtxErrorf(context.Background(), "KITEX: processing error, remoteAddr=%v, error=%s", "127.0.0.1:5", "read tcp 127.0.0.1:1->127.0.0.1:5: read: connection reset by peer")
	k.CtxErrorf(context.Background(), "KITEX: processing error, remoteAddr=%v, error=%s", "127.0.0.1:6", "EOF")
	k.Errorf("KITEX: processing error, remoteAddr=%v, error=%s", "127.0.0.1:7", "bad frame")
	if out := buf.String(); strings.Count(out, "level=DEBUG") != 2 || strings.Count(out, "level=ERROR") != 1 || !strings.Contains(out, "bad frame") {
		t.Errorf("hang-ups and a real processing error logged as %q; want the hang-ups at DEBUG, the other at ERROR", out)
	}

	var out bytes.Buffer
	k.SetOutput(&out)
	k.Warn("to the new output")
	if !strings.Contains(out.String(), "to the new output") {
		t.Errorf("SetOutput: new output has %q", out.String())
	}
}

// TestLogLimiterCountsBytes: beyond logMaxBytes in a window, messages are
// dropped however few lines they are.
func TestLogLimiterCountsBytes(t *testing.T) {
	r := newLogLimiter((&fakeClock{t: time.Unix(1000, 0)}).now)
	passed := 0
	for i := range 100 {
		if ok, _ := r.allow(fmt.Sprint("key", string(rune('a'+i%26)), i/26), MaxLogMessageBytes); ok {
			passed++
		}
	}
	if want := min(100, logMaxBytes/MaxLogMessageBytes); passed != want {
		t.Fatalf("%d of 100 messages of %d bytes passed, want %d", passed, MaxLogMessageBytes, want)
	}
	if ok, _ := r.allow("big", logMaxBytes+1); ok {
		t.Fatal("a message over the window's byte budget passed")
	}
}

func TestCutForLog(t *testing.T) {
	for _, n := range []int{0, MaxLogMessageBytes, MaxLogMessageBytes + 1, 4_000_000} {
		s := CutForLog(strings.Repeat("x", n))
		if n <= MaxLogMessageBytes && len(s) != n || n > MaxLogMessageBytes && (len(s) > MaxLogMessageBytes+64 || !strings.Contains(s, fmt.Sprint(n))) {
			t.Errorf("CutForLog of %d bytes: %d bytes %q...", n, len(s), s[:min(len(s), 40)])
		}
	}
}

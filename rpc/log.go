package rpc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/netpoll"
)

// Limits of the log rate limiter. When a process runs out of file
// descriptors, netpoll logs a failed accept every few milliseconds; on this
// kind of machine that made gigabytes of log in a minute. Repeats of one
// message beyond logBurst per logWindow are counted, not written, and so
// is everything beyond logMaxBytes per window: messages carry what clients
// send (a method name of 4 MB made 4 MB lines), so lines are not a measure
// of cost. Each message is cut to MaxLogMessageBytes first.
const (
	logWindow   = 10 * time.Second
	logBurst    = 5
	logMaxKeys  = 1024    // distinct messages tracked per window; beyond that they share one budget
	logKeyLen   = 160     // bytes of a message that identify it
	logMaxBytes = 1 << 20 // bytes of messages written per window, all keys together
)

// MaxLogMessageBytes bounds a message this package logs, and what callers
// echo of client input in a log record (CutForLog): longer ones are cut.
const MaxLogMessageBytes = 512

// CutForLog returns s cut to MaxLogMessageBytes, saying how much was cut:
// for a name or message from a client that goes into a log record.
func CutForLog(s string) string {
	if len(s) <= MaxLogMessageBytes {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes, cut)", strings.ToValidUTF8(s[:MaxLogMessageBytes], ""), len(s))
}

// logLimiter lets through at most logBurst messages with the same key per
// window, and reports how many it dropped.
type logLimiter struct {
	now func() time.Time

	mu         sync.Mutex
	start      time.Time      // of the current window
	counts     map[string]int // messages seen this window, by key
	bytes      int            // bytes of messages let through this window
	suppressed int            // messages dropped this window
}

func newLogLimiter(now func() time.Time) *logLimiter {
	return &logLimiter{now: now, counts: make(map[string]int)}
}

// allow reports whether a message with key, of size bytes, may be
// written: at most logBurst per key and logMaxBytes in all per window.
// When a window ends with dropped messages, dropped says how many, so the
// caller can say so once.
func (r *logLimiter) allow(key string, size int) (ok bool, dropped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.now(); t.Sub(r.start) >= logWindow {
		dropped = r.suppressed
		r.start, r.suppressed, r.bytes = t, 0, 0
		clear(r.counts)
	}
	if _, seen := r.counts[key]; !seen && len(r.counts) >= logMaxKeys {
		key = "" // too many distinct messages: they share one budget
	}
	r.counts[key]++
	if r.counts[key] > logBurst || r.bytes+size > logMaxBytes {
		r.suppressed++
		return false, dropped
	}
	r.bytes += size
	return true, dropped
}

// logKey returns the part of msg that identifies a repeated message: its
// first logKeyLen bytes without digits, so that messages differing only in
// numbers (ports, fds, retry delays) count as one.
func logKey(msg string) string {
	var b strings.Builder
	for i := 0; i < len(msg) && b.Len() < logKeyLen; i++ {
		if c := msg[i]; c < '0' || c > '9' {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// kitexLogger is a klog.FullLogger writing to a slog.Logger, rate-limited.
type kitexLogger struct {
	limiter *logLimiter
	exit    func()       // after a Fatal record; os.Exit(1) but in tests
	minimum atomic.Int64 // slog.Level; records below it are dropped
	logger  atomic.Pointer[slog.Logger]
}

// NewKitexLogger returns a Kitex logger that writes to l (slog.Default() if
// nil) at the matching slog levels (Trace below Debug, Notice between Info
// and Warn, Fatal above Error) and drops repeats of one message beyond a
// few per ten seconds, reporting how many it dropped. Install it once, from
// main, with klog.SetLogger: Kitex's logger is process-wide.
//
// Fatal logs and then exits the process, as Kitex's own logger does.
// SetOutput replaces l by a text handler writing to the given writer.
func NewKitexLogger(l *slog.Logger) klog.FullLogger {
	if l == nil {
		l = slog.Default()
	}
	k := &kitexLogger{limiter: newLogLimiter(time.Now), exit: func() { os.Exit(1) }}
	k.logger.Store(l.With("component", "kitex"))
	k.minimum.Store(int64(levelTrace))
	return k
}

// NewLogWriter returns an io.Writer that turns each line written to it into
// a rate-limited slog record at level Warn with the attribute
// component=component. It is meant for libraries that log through a
// log.Logger, netpoll above all, whose accept-failure messages are the
// flood this package guards against:
//
//	netpoll.Configure(netpoll.Config{LoggerOutput: rpc.NewLogWriter(l, "netpoll")})
//
// A leading log.LstdFlags timestamp is removed.
func NewLogWriter(l *slog.Logger, component string) io.Writer {
	if l == nil {
		l = slog.Default()
	}
	return &logWriter{l: l.With("component", component), limiter: newLogLimiter(time.Now)}
}

type logWriter struct {
	l       *slog.Logger
	limiter *logLimiter
}

func (w *logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		line = CutForLog(trimStdTimestamp(line))
		if line == "" {
			continue
		}
		ok, dropped := w.limiter.allow(logKey(line), len(line))
		if dropped > 0 {
			w.l.Warn("rpc: repeated log messages dropped", "dropped", dropped, "window", logWindow)
		}
		if ok {
			w.l.Warn(line)
		}
	}
	return len(p), nil
}

// trimStdTimestamp removes a "2006/01/02 15:04:05 " prefix.
func trimStdTimestamp(s string) string {
	const layout = "2006/01/02 15:04:05 "
	if len(s) >= len(layout) {
		if _, err := time.Parse(layout[:len(layout)-1], s[:len(layout)-1]); err == nil {
			return s[len(layout):]
		}
	}
	return s
}

// isHangUp reports whether m is Kitex's report of a connection that was
// closed or reset before it carried a request: the gonet transport
// (ServerConfig.TLS, ServerConfig.GoNet) reports every failed first read
// as a "processing error", whereas its handlers, and netpoll, take a
// caller hanging up for what it is. A replica's liveness check
// (replica.PeerTransport.CheckPeer) does exactly that to the peer port.
// Such records are logged at Debug, not Error.
func isHangUp(m string) bool {
	if !strings.HasPrefix(m, "KITEX: processing error, ") {
		return false
	}
	for _, s := range []string{"connection reset by peer", "broken pipe", "error=EOF"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return strings.HasSuffix(m, ": EOF")
}

// slog levels of the klog levels.
const (
	levelTrace  = slog.LevelDebug - 4
	levelNotice = slog.LevelInfo + 2
	levelFatal  = slog.LevelError + 4
)

func slogLevel(l klog.Level) slog.Level {
	switch l {
	case klog.LevelTrace:
		return levelTrace
	case klog.LevelDebug:
		return slog.LevelDebug
	case klog.LevelInfo:
		return slog.LevelInfo
	case klog.LevelNotice:
		return levelNotice
	case klog.LevelWarn:
		return slog.LevelWarn
	case klog.LevelError:
		return slog.LevelError
	default:
		return levelFatal
	}
}

// log writes one record, unless it is below the level or a repeat beyond
// the limiter's budget. Fatal records are always written.
func (k *kitexLogger) log(ctx context.Context, lv klog.Level, msg func() string) {
	level := slogLevel(lv)
	l := k.logger.Load()
	if ctx == nil {
		ctx = context.Background()
	}
	if lv == klog.LevelError {
		if m := msg(); isHangUp(m) {
			level = slog.LevelDebug
			msg = func() string { return m }
		}
	}
	if int64(level) < k.minimum.Load() || !l.Enabled(ctx, level) {
		if lv == klog.LevelFatal {
			k.exit()
		}
		return
	}
	m := CutForLog(msg())
	ok, dropped := k.limiter.allow(logKey(m), len(m))
	if dropped > 0 {
		l.Log(ctx, slog.LevelWarn, "rpc: repeated log messages dropped", "dropped", dropped, "window", logWindow)
	}
	if ok || lv == klog.LevelFatal {
		l.Log(ctx, level, m)
	}
	if lv == klog.LevelFatal {
		k.exit()
	}
}

func (k *kitexLogger) logv(lv klog.Level, v []any) {
	k.log(context.Background(), lv, func() string { return fmt.Sprint(v...) })
}

func (k *kitexLogger) logf(ctx context.Context, lv klog.Level, format string, v []any) {
	k.log(ctx, lv, func() string { return fmt.Sprintf(format, v...) })
}

func (k *kitexLogger) Trace(v ...any)  { k.logv(klog.LevelTrace, v) }
func (k *kitexLogger) Debug(v ...any)  { k.logv(klog.LevelDebug, v) }
func (k *kitexLogger) Info(v ...any)   { k.logv(klog.LevelInfo, v) }
func (k *kitexLogger) Notice(v ...any) { k.logv(klog.LevelNotice, v) }
func (k *kitexLogger) Warn(v ...any)   { k.logv(klog.LevelWarn, v) }
func (k *kitexLogger) Error(v ...any)  { k.logv(klog.LevelError, v) }
func (k *kitexLogger) Fatal(v ...any)  { k.logv(klog.LevelFatal, v) }

func (k *kitexLogger) Tracef(format string, v ...any) {
	k.logf(context.Background(), klog.LevelTrace, format, v)
}
func (k *kitexLogger) Debugf(format string, v ...any) {
	k.logf(context.Background(), klog.LevelDebug, format, v)
}
func (k *kitexLogger) Infof(format string, v ...any) {
	k.logf(context.Background(), klog.LevelInfo, format, v)
}
func (k *kitexLogger) Noticef(format string, v ...any) {
	k.logf(context.Background(), klog.LevelNotice, format, v)
}
func (k *kitexLogger) Warnf(format string, v ...any) {
	k.logf(context.Background(), klog.LevelWarn, format, v)
}
func (k *kitexLogger) Errorf(format string, v ...any) {
	k.logf(context.Background(), klog.LevelError, format, v)
}
func (k *kitexLogger) Fatalf(format string, v ...any) {
	k.logf(context.Background(), klog.LevelFatal, format, v)
}

func (k *kitexLogger) CtxTracef(ctx context.Context, format string, v ...any) {
	k.logf(ctx, klog.LevelTrace, format, v)
}
func (k *kitexLogger) CtxDebugf(ctx context.Context, format string, v ...any) {
	k.logf(ctx, klog.LevelDebug, format, v)
}
func (k *kitexLogger) CtxInfof(ctx context.Context, format string, v ...any) {
	k.logf(ctx, klog.LevelInfo, format, v)
}
func (k *kitexLogger) CtxNoticef(ctx context.Context, format string, v ...any) {
	k.logf(ctx, klog.LevelNotice, format, v)
}
func (k *kitexLogger) CtxWarnf(ctx context.Context, format string, v ...any) {
	k.logf(ctx, klog.LevelWarn, format, v)
}
func (k *kitexLogger) CtxErrorf(ctx context.Context, format string, v ...any) {
	k.logf(ctx, klog.LevelError, format, v)
}
func (k *kitexLogger) CtxFatalf(ctx context.Context, format string, v ...any) {
	k.logf(ctx, klog.LevelFatal, format, v)
}

// SetLevel drops records below lv.
func (k *kitexLogger) SetLevel(lv klog.Level) { k.minimum.Store(int64(slogLevel(lv))) }

// SetOutput sends records, as text, to w instead of the slog.Logger given
// to NewKitexLogger.
func (k *kitexLogger) SetOutput(w io.Writer) {
	k.logger.Store(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: levelTrace})).With("component", "kitex"))
}

// InstallProcessLoggers routes the process-wide loggers of Kitex (klog) and
// netpoll to l, through [NewKitexLogger] and [NewLogWriter], so that their
// floods are rate-limited too. Those loggers belong to the whole process:
// call this once, from main (or TestMain), not from library code.
func InstallProcessLoggers(l *slog.Logger) error {
	klog.SetLogger(NewKitexLogger(l))
	// Configure changes only what is set in Config (LoadBalance 0 is
	// netpoll's default, round robin).
	if err := netpoll.Configure(netpoll.Config{LoggerOutput: NewLogWriter(l, "netpoll")}); err != nil {
		return fmt.Errorf("rpc: configuring netpoll's logger: %w", err)
	}
	return nil
}

package client

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/client/keepalive"
	"github.com/chubbygo/chubby/gen/chubby"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := Config{}.withDefaults(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Addrs, []string{DefaultAddr}) {
		t.Errorf("Addrs = %v, want [%s]", cfg.Addrs, DefaultAddr)
	}
	if cfg.ConnectTimeout != DefaultConnectTimeout || cfg.CallTimeout != DefaultCallTimeout {
		t.Errorf("timeouts = %v, %v", cfg.ConnectTimeout, cfg.CallTimeout)
	}
	if cfg.ClientName == "" || len(cfg.ClientName) > chubby.MAX_CLIENT_NAME_BYTES {
		t.Errorf("ClientName = %q", cfg.ClientName)
	}
	if cfg.Logger == nil {
		t.Error("Logger is nil")
	}
}

func TestConfigEnv(t *testing.T) {
	tests := []struct {
		name    string
		addrs   []string
		env     string
		want    []string
		wantErr string
	}{
		{name: "env one", env: "10.0.0.1:7000", want: []string{"10.0.0.1:7000"}},
		{name: "env list with blanks", env: " a:1 , b:2,c:3 ", want: []string{"a:1", "b:2", "c:3"}},
		{name: "env blank means default", env: "   ", want: []string{DefaultAddr}},
		{name: "explicit wins over env", addrs: []string{"x:9"}, env: "a:1", want: []string{"x:9"}},
		{name: "ipv6", env: "[::1]:7000", want: []string{"[::1]:7000"}},
		{name: "env trailing comma", env: "a:1,", wantErr: "CHUBBY_CELL"},
		{name: "env no port", env: "a", wantErr: "CHUBBY_CELL"},
		{name: "env duplicate", env: "a:1,a:1", wantErr: "twice"},
		{name: "explicit bad", addrs: []string{"a:0"}, wantErr: "Config.Addrs"},
		{name: "explicit empty entry", addrs: []string{""}, wantErr: "empty address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Config{Addrs: tt.addrs}.withDefaults(env(map[string]string{EnvCell: tt.env}))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.Addrs, tt.want) {
				t.Errorf("Addrs = %v, want %v", cfg.Addrs, tt.want)
			}
		})
	}
}

func TestConfigInvalid(t *testing.T) {
	for _, cfg := range []Config{
		{ClientName: strings.Repeat("n", chubby.MAX_CLIENT_NAME_BYTES+1)},
		{CallTimeout: -time.Second},
		{ConnectTimeout: -time.Second},
	} {
		if _, err := cfg.withDefaults(env(nil)); err == nil {
			t.Errorf("withDefaults(%+v) = nil error", cfg)
		}
	}
}

func TestValidateAddr(t *testing.T) {
	good := []string{"127.0.0.1:7000", "localhost:1", "h:65535", "[::1]:7000", "cell-1.example.com:7000"}
	for _, a := range good {
		if err := ValidateAddr(a); err != nil {
			t.Errorf("ValidateAddr(%q): %v", a, err)
		}
	}
	bad := []string{"", "localhost", ":7000", "h:", "h:0", "h:65536", "h:-1", "h:+1", "h:x", "h:7000:1",
		"::1:7000", "a b:1", "http://h:1", "h/x:1"}
	for _, a := range bad {
		if err := ValidateAddr(a); err == nil {
			t.Errorf("ValidateAddr(%q) = nil, want an error", a)
		}
	}
}

func TestBackoffBounds(t *testing.T) {
	for _, tc := range []struct{ base, max time.Duration }{
		{callBackoffBase, callBackoffMax},
		{keepalive.DefaultBackoffBase, keepalive.DefaultBackoffMax},
		{time.Millisecond, time.Hour},
	} {
		prev := time.Duration(0)
		for attempt := 0; attempt < 100; attempt++ {
			for _, j := range []float64{-1, 0, 0.5, 0.999999, 1, 2} {
				d := keepalive.Backoff(tc.base, tc.max, attempt, j)
				if d < tc.base/2 || d > tc.max {
					t.Fatalf("Backoff(%v, %v, %d, %v) = %v, out of [%v, %v]",
						tc.base, tc.max, attempt, j, d, tc.base/2, tc.max)
				}
			}
			// Without jitter the delay grows monotonically up to max.
			d := keepalive.Backoff(tc.base, tc.max, attempt, 0)
			if d < prev {
				t.Fatalf("backoffDelay decreased at attempt %d: %v < %v", attempt, d, prev)
			}
			prev = d
		}
		if d := keepalive.Backoff(tc.base, tc.max, 1000, 0.999); d < tc.max*9/10 {
			t.Errorf("backoffDelay never approaches max %v: %v", tc.max, d)
		}
	}
	// The whole retry budget of one call is small and bounded.
	var total time.Duration
	for attempt := 0; attempt < maxCallAttempts-1; attempt++ {
		total += keepalive.Backoff(callBackoffBase, callBackoffMax, attempt, 0.999)
	}
	if total > 2*time.Second {
		t.Errorf("pauses of one call add up to %v", total)
	}
}

func TestMasterTracker(t *testing.T) {
	m := newLocator([]string{"a:1", "b:1", "c:1"}, nil, 0)
	if got := m.addr(); got != "a:1" {
		t.Fatalf("first guess %s", got)
	}
	m.redirect("a:1", "c:1") // NOT_MASTER with a hint
	if got := m.addr(); got != "c:1" {
		t.Fatalf("after hint: %s", got)
	}
	m.redirect("b:1", "a:1") // stale: c:1 is the guess now, not b:1
	if got := m.addr(); got != "c:1" {
		t.Fatalf("stale redirect moved the guess to %s", got)
	}
	m.unreachable("c:1") // next configured address
	if got := m.addr(); got != "b:1" {
		t.Fatalf("after unreachable: %s", got)
	}
	m.redirect("b:1", "not an address") // a bad hint is ignored
	if got := m.addr(); got != "c:1" {
		t.Fatalf("after bad hint: %s", got)
	}
	m.redirect("c:1", "") // no hint: round robin
	m.redirect("a:1", "d:1")
	if got := m.addr(); got != "d:1" {
		t.Fatalf("hint outside the configured list: %s", got)
	}
	m.learned("b:1")
	if got := m.addr(); got != "b:1" {
		t.Fatalf("after learned: %s", got)
	}
	single := newLocator([]string{"x:1"}, nil, 0)
	single.unreachable("x:1")
	if got := single.addr(); got != "x:1" {
		t.Fatalf("single replica: %s", got)
	}
}

func TestErrorHelpers(t *testing.T) {
	ce := &chubby.ChubbyError{Code: chubby.ErrorCode_NOT_FOUND, Message: "no node /a/b"}
	err := fmt.Errorf("outer: %w", &OpError{Op: "open", Path: "/a/b", Err: ce})
	if c, ok := Code(err); !ok || c != chubby.ErrorCode_NOT_FOUND {
		t.Errorf("Code = %v, %v", c, ok)
	}
	if !IsCode(err, chubby.ErrorCode_NOT_FOUND) || IsCode(err, chubby.ErrorCode_EXISTS) {
		t.Error("IsCode wrong")
	}
	if got, want := Describe(err), "not found: no node /a/b"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	var oe *OpError
	if !errors.As(err, &oe) || oe.Error() != "chubby: open /a/b: not found: no node /a/b" {
		t.Errorf("OpError = %v", oe)
	}
	if _, ok := Code(errors.New("plain")); ok {
		t.Error("Code of a plain error")
	}
	expired := &OpError{Op: "read", Err: fmt.Errorf("%w: lease ran out", ErrSessionExpired)}
	if !IsCode(expired, chubby.ErrorCode_SESSION_EXPIRED) {
		t.Error("local expiry does not count as SESSION_EXPIRED")
	}
	nm := &chubby.ChubbyError{Code: chubby.ErrorCode_NOT_MASTER, Message: "ask elsewhere"}
	addr := "10.0.0.2:7000"
	nm.MasterAddress = &addr
	if got := Describe(nm); got != "not master: ask elsewhere (master at 10.0.0.2:7000)" {
		t.Errorf("Describe(NOT_MASTER) = %q", got)
	}
	if got := CodeText(chubby.ErrorCode(99)); got != "error 99" {
		t.Errorf("CodeText(99) = %q", got)
	}
}

func TestLockOptions(t *testing.T) {
	if (LockOptions{}).lockDelayMs() != nil {
		t.Error("zero LockDelay must leave the field unset")
	}
	if p := (LockOptions{LockDelay: NoLockDelay}).lockDelayMs(); p == nil || *p != 0 {
		t.Errorf("NoLockDelay = %v", p)
	}
	if p := (LockOptions{LockDelay: 1500*time.Millisecond + 1}).lockDelayMs(); p == nil || *p != 1501 {
		t.Errorf("rounding up: %v", p)
	}
	if got := ceilMs(time.Duration(1<<63 - 1)); got <= 0 {
		t.Errorf("ceilMs overflowed: %d", got)
	}
}

// TestDefaultConfig: DefaultConfig holds the documented values, and a
// Config made from it still resolves its addresses when Connect runs.
func TestDefaultConfig(t *testing.T) {
	d := DefaultConfig()
	if d.ConnectTimeout != time.Second || d.CallTimeout != 10*time.Second || d.GracePeriod != 45*time.Second ||
		d.CacheMaxEntries != 10000 || d.DisableCache || d.Logger == nil || d.Addrs != nil || d.ClientName != "" {
		t.Fatalf("DefaultConfig() = %+v", d)
	}
	cfg, err := d.withDefaults(env(map[string]string{EnvCell: "h1:1,h2:2"}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Addrs, []string{"h1:1", "h2:2"}) || cfg.ClientName == "" {
		t.Errorf("from DefaultConfig: Addrs %v, ClientName %q", cfg.Addrs, cfg.ClientName)
	}
}

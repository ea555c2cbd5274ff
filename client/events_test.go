package client

import (
	"testing"
	"time"
)

// TestEventQueueDropsOldest: a full queue drops its oldest event, never
// blocks, and delivers what it holds before it reports closed.
func TestEventQueueDropsOldest(t *testing.T) {
	q := newEventQueue[SessionEvent](SessionEventBuffer)
	total := SessionEventBuffer + 5
	for i := range total {
		dropped := q.push(SessionEvent{Kind: EventMasterChanged, Epoch: int64(i)})
		if want := i >= SessionEventBuffer; dropped != want {
			t.Fatalf("push %d: dropped=%v, want %v", i, dropped, want)
		}
	}
	q.push(SessionEvent{Kind: EventExpired, Epoch: int64(total)})
	q.close()
	q.push(SessionEvent{Kind: EventSafe}) // after close: ignored, no panic
	q.close()                             // idempotent

	var got []SessionEvent
	for ev := range q.ch {
		got = append(got, ev)
	}
	if len(got) != SessionEventBuffer {
		t.Fatalf("%d events delivered, want %d", len(got), SessionEventBuffer)
	}
	// The newest survive, in order, the last one included.
	for i, ev := range got {
		if want := int64(total - SessionEventBuffer + 1 + i); ev.Epoch != want {
			t.Errorf("event %d has epoch %d, want %d", i, ev.Epoch, want)
		}
	}
	if got[len(got)-1].Kind != EventExpired {
		t.Errorf("last event %v, want expired", got[len(got)-1].Kind)
	}
	if q.dropped != 6 {
		t.Errorf("dropped %d, want 6", q.dropped)
	}
}

func TestStateNames(t *testing.T) {
	for st, want := range map[SessionState]string{StateSafe: "safe", StateJeopardy: "jeopardy",
		StateExpired: "expired", StateClosed: "closed", 0: "SessionState(0)"} {
		if st.String() != want {
			t.Errorf("%d: %q, want %q", int(st), st.String(), want)
		}
	}
	for k, want := range map[SessionEventKind]string{EventJeopardy: "jeopardy", EventSafe: "safe",
		EventExpired: "expired", EventMasterChanged: "master-changed", 9: "SessionEventKind(9)"} {
		if k.String() != want {
			t.Errorf("%d: %q, want %q", int(k), k.String(), want)
		}
	}
}

// TestGracePeriodConfig: the grace period defaults to 45 s; negative is refused.
func TestGracePeriodConfig(t *testing.T) {
	cfg, err := Config{}.withDefaults(env(nil))
	if err != nil || cfg.GracePeriod != DefaultGracePeriod || DefaultGracePeriod != 45*time.Second {
		t.Errorf("default grace period %v, %v", cfg.GracePeriod, err)
	}
	if _, err := (Config{GracePeriod: -time.Second}).withDefaults(env(nil)); err == nil {
		t.Error("negative grace period accepted")
	}
	cfg, err = Config{GracePeriod: time.Second}.withDefaults(env(nil))
	if err != nil || cfg.GracePeriod != time.Second {
		t.Errorf("explicit grace period %v, %v", cfg.GracePeriod, err)
	}
}

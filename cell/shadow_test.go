package cell

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// The shadow encodes, while more entries are applied, exactly the state
// the machine had when Snapshot was called: the bytes equal an encoding
// of the served state taken at that moment.
func TestShadowSnapshotIsTheStateAtTheCall(t *testing.T) {
	m := newMachine(fs.DefaultLimits(), 10)
	defer m.close()
	rng := rand.New(rand.NewPCG(1, 2))
	index := uint64(0)
	apply := func(op *fsm.Op) {
		index++
		m.Apply(index, fs.EncodeCommand(&fsm.Command{TimeMs: 1_700_000_000_000 + int64(index), Op: op}))
	}
	apply(&fsm.Op{CreateSession: &chubby.CreateSessionRequest{ClientName: "t"}})
	session := chubby.SessionID(1)
	type taken struct {
		want []byte
		wait func() ([]byte, error)
	}
	var snaps []taken
	for i := range 3000 {
		path := fmt.Sprintf("/d%d/f%d", rng.IntN(10), rng.IntN(50))
		switch rng.IntN(4) {
		case 0, 1:
			yes := true
			apply(&fsm.Op{CreateFile: &chubby.CreateFileRequest{Session: session, Path: path, Content: []byte(fmt.Sprint(i)), MakeParents: &yes}})
		case 2:
			apply(&fsm.Op{CreateSession: &chubby.CreateSessionRequest{ClientName: fmt.Sprint("c", i)}})
		default:
			apply(&fsm.Op{Tick: &fsm.Tick{}})
		}
		if i%250 == 0 {
			snaps = append(snaps, taken{want: stateBytes(m), wait: m.Snapshot()})
		}
	}
	for i, s := range snaps {
		got, err := s.wait()
		if err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
		if !bytes.Equal(got, s.want) {
			t.Fatalf("snapshot %d: the shadow's encoding (%d bytes) differs from the state at the call (%d bytes)", i, len(got), len(s.want))
		}
	}
}

// A shadow that falls too far behind is dropped; the next snapshot is
// encoded from the served state and rebuilds it.
func TestShadowDroppedAndRebuilt(t *testing.T) {
	m := newMachine(fs.DefaultLimits(), 10)
	defer m.close()
	m.sh.mu.Lock()
	m.sh.dropLocked()
	m.sh.mu.Unlock()
	m.Apply(1, fs.EncodeCommand(&fsm.Command{TimeMs: 1_700_000_000_000, Op: &fsm.Op{CreateSession: &chubby.CreateSessionRequest{ClientName: "t"}}}))
	want := stateBytes(m)
	got, err := m.Snapshot()()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("snapshot of a dropped shadow: %v, equal %v", err, bytes.Equal(got, want))
	}
	m.Apply(2, fs.EncodeCommand(&fsm.Command{TimeMs: 1_700_000_000_001, Op: &fsm.Op{Tick: &fsm.Tick{}}}))
	want = stateBytes(m)
	if got, err = m.Snapshot()(); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("snapshot of the rebuilt shadow: %v, equal %v", err, bytes.Equal(got, want))
	}
}

// A snapshot asked for when the shadow's queue is full is not left
// waiting for an encoding that will never come: it is encoded from the
// served state, and the shadow rebuilt.
func TestShadowFullQueueSnapshot(t *testing.T) {
	m := newMachine(fs.DefaultLimits(), 10)
	defer m.close()
	m.Apply(1, fs.EncodeCommand(&fsm.Command{TimeMs: 1_700_000_000_000, Op: &fsm.Op{CreateSession: &chubby.CreateSessionRequest{ClientName: "t"}}}))
	m.sh.mu.Lock()
	m.sh.maxQueue = 0 // as if the shadow were that far behind
	m.sh.mu.Unlock()
	want := stateBytes(m)
	done := make(chan []byte, 1)
	go func() {
		b, err := m.Snapshot()()
		if err != nil {
			t.Error(err)
		}
		done <- b
	}()
	select {
	case got := <-done:
		if !bytes.Equal(got, want) {
			t.Fatal("the snapshot differs from the state")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a snapshot asked for with the shadow's queue full never came")
	}
}

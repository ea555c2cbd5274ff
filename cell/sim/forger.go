package sim

import "github.com/chubbygo/chubby/replica/vr"

// The forger (Options.Forger) is one more sender on the replicas' network,
// as an attacker on a plaintext peer port or a confused replica would be.
// It sees every replica message sent, and while the faults last it sends,
// every 1–20 ms, one of the last 256 again: unchanged (a replay, out of
// order), to another replica (re-addressed), or — for the messages that
// carry no claim about a log (Probe, ProbeReply, StartViewChange, Commit)
// — with a forged view (one or a few ahead, far ahead, at the end of the
// epoch, in another epoch, behind), a forged sender, or a forged grant.
// Once the faults end it stops, and the usual checkers demand that the
// cell serves every client within SettleTime and converges.
//
// What the forger does not do is what the core trusts (package vr's
// documentation, "What the core trusts"): it does not change the view or
// sender of a message that describes a log — Prepare, PrepareOK, DoViewChange,
// StartView, GetLog, Log, Snapshot — nor any message's body. A member
// that lies about its log is outside the model; TLS keeps strangers out.

const forgerMemory = 256

type forger struct {
	w    *world
	seen []vr.Message // ring of the last forgerMemory messages
	next int
	sent int
}

func (f *forger) observe(m vr.Message) {
	if len(f.seen) < forgerMemory {
		f.seen = append(f.seen, m)
		return
	}
	f.seen[f.next] = m
	f.next = (f.next + 1) % forgerMemory
}

func (f *forger) schedule() {
	w := f.w
	w.after(w.between(ms, 20*ms), func() {
		if w.now >= w.faultsEnd || len(f.seen) == 0 {
			if w.now < w.faultsEnd {
				f.schedule()
			}
			return
		}
		m := f.forge(f.seen[w.intn(len(f.seen))])
		f.sent++
		w.after(w.net.delay(), func() {
			if int(m.To) >= 1 && int(m.To) <= len(w.replicas) {
				if r := w.replicas[m.To-1]; r.up {
					r.receive(m)
				}
			}
		})
		f.schedule()
	})
}

// forge returns a changed copy of m.
func (f *forger) forge(m vr.Message) vr.Message {
	w := f.w
	m.Entries = append([]vr.Entry(nil), m.Entries...)
	m.Runs = append([]vr.Run(nil), m.Runs...)
	if w.chance(0.3) {
		m.To = uint64(1 + w.intn(len(w.replicas)))
	}
	switch m.Type {
	case vr.MsgProbe, vr.MsgProbeReply, vr.MsgStartViewChange, vr.MsgCommit:
	default:
		return m // a replay, perhaps re-addressed
	}
	if w.chance(0.5) {
		m.View = f.forgeView(m.View)
	}
	if w.chance(0.3) {
		m.From = uint64(1 + w.intn(len(w.replicas)))
	}
	if m.Type == vr.MsgProbeReply && w.chance(0.5) {
		m.Granted = !m.Granted
	}
	return m
}

func (f *forger) forgeView(v uint64) uint64 {
	w := f.w
	epoch := v &^ (1<<32 - 1)
	switch w.intn(8) {
	case 0:
		return v + 1
	case 1:
		return v + uint64(2+w.intn(5))
	case 2:
		return v + uint64(10+w.intn(10_000))
	case 3:
		return epoch | 1<<32 - 1 // the outside tester's view
	case 4:
		return epoch | (1<<32 - 1 - uint64(w.intn(1<<25)))
	case 5:
		return v + 1<<32 // the next epoch
	case 6:
		if v > 0 {
			return v - 1
		}
		return v
	default:
		return epoch | uint64(w.rng.Uint32()>>1)
	}
}

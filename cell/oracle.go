package cell

import (
	"context"
	"sync"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// oracle is the master's timestamp oracle: master.Oracle (the rules) under
// a mutex, with the reservations it asks for proposed in the background.
// Calls that find the window empty wait for the next reservation.
type oracle struct {
	mu      sync.Mutex
	o       *master.Oracle
	changed chan struct{} // closed, and replaced, when the window may have changed
}

func newOracle() *oracle {
	return &oracle{o: master.NewOracle(0), changed: make(chan struct{})}
}

// signal wakes the waiters; o.mu held.
func (or *oracle) signal() {
	close(or.changed)
	or.changed = make(chan struct{})
}

// reset starts a term at the mark in the state (becomeMaster).
func (or *oracle) reset(reserved int64) {
	or.mu.Lock()
	defer or.mu.Unlock()
	or.o.Reset(reserved)
	or.signal()
}

// stop ends the term (loseMaster): nothing more is handed out.
func (or *oracle) stop() {
	or.mu.Lock()
	defer or.mu.Unlock()
	or.o.Stop()
	or.signal()
}

// timestamps hands out n timestamps (GetTimestamps), reserving more
// through the log when the window runs low, by carrying out the call's
// master.TimestampsCall: only under the master lease held at that moment.
func (s *Server) timestamps(ctx context.Context, n int64) (int64, error) {
	t := master.NewTimestampsCall(n, leaseHold)
	var changed chan struct{}
	for st := t.Start(); ; {
		switch st.Do {
		case master.TSLease:
			st = t.Lease(s.serving.Load(), s.log.CanServeReads(), s.log.Now())
		case master.TSAwaitLease:
			if err := s.leaseBack(ctx, st.Until); err != nil {
				st = t.Gone(err)
			} else {
				st = t.LeaseBack()
			}
		case master.TSTake:
			var first int64
			var ok bool
			first, ok, changed = s.takeTimestamps(n)
			st = t.Took(first, ok)
		case master.TSAwaitWindow:
			select {
			case <-changed:
				st = t.WindowChanged(s.serving.Load())
			case <-ctx.Done():
				st = t.Gone(fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "no timestamps before the call's deadline: %v", ctx.Err()))
			case <-s.closed:
				st = t.Gone(fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the replica is shutting down"))
			}
		case master.TSReply:
			s.metrics.tsHanded.Add(float64(n))
			return st.First, nil
		case master.TSFail:
			if st.Lapsed {
				s.metrics.leaseRefusals.Inc()
			}
			if st.NotMaster {
				return 0, s.notMasterErr()
			}
			return 0, st.Err
		default:
			return 0, fs.Errorf(chubby.ErrorCode_INTERNAL, "GetTimestamps: step %v out of turn", st.Do)
		}
	}
}

// takeTimestamps takes n timestamps from the window if it has them, and
// asks for the next reservation ahead of need, so that callers rarely
// wait. changed is closed when the window may have changed.
func (s *Server) takeTimestamps(n int64) (first int64, ok bool, changed chan struct{}) {
	or := s.oracle
	or.mu.Lock()
	first, ok = or.o.Take(n)
	term, upto, want := or.o.Want(n)
	changed = or.changed
	or.mu.Unlock()
	if want {
		s.goBackground(func() { s.reserveTimestamps(term, upto) })
	}
	return first, ok, changed
}

// reserveTimestamps proposes the oracle's reservation of term up to upto
// and reports how it ended.
func (s *Server) reserveTimestamps(term uint64, upto int64) {
	_, err := s.submit(context.Background(), proposal{op: &fsm.Op{ReserveTimestamps: &fsm.ReserveTimestamps{Upto: upto}}})
	if err != nil {
		s.cfg.Logger.Warn("oracle: reserving timestamps", "upto", upto, "err", err)
		s.metrics.tsReserves.WithLabelValues("failed").Inc()
		// Not again at once (master.ReserveRetryDelay).
		select {
		case <-time.After(master.ReserveRetryDelay):
		case <-s.closed:
		}
	} else {
		s.metrics.tsReserves.WithLabelValues("ok").Inc()
	}
	or := s.oracle
	or.mu.Lock()
	defer or.mu.Unlock()
	if err != nil {
		or.o.Failed(term)
	} else {
		or.o.Reserved(term, upto)
	}
	or.signal()
}

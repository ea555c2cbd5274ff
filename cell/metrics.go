package cell

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/replica/vr"
)

// metrics are the cell's Prometheus metrics (the rpc layer adds per-method
// request counts and latencies).
type metrics struct {
	commands     *prometheus.CounterVec
	batchEntries prometheus.Histogram
	fsync        prometheus.Histogram
	// loopPause is how long the replica's loop took over each input: while
	// it runs, no command, lease renewal or message is handled.
	loopPause  prometheus.Histogram
	maxPause   atomic.Int64 // longest since the start, ns
	parkedAcq  prometheus.Gauge
	watches    prometheus.Gauge
	eventsSent prometheus.Counter
	// tsHanded counts timestamps the oracle handed out; tsReserves its
	// reservations by result (ok, failed).
	tsHanded   prometheus.Counter
	tsReserves *prometheus.CounterVec
	// invalidationWait is how long changes waited for caching sessions to
	// acknowledge invalidations.
	invalidationWait prometheus.Histogram
	// leaseRefusals counts calls refused because the master lease lapsed
	// and did not come back within leaseHold.
	leaseRefusals prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chubby_commands_total",
			Help: "Commands applied through the log, by operation and outcome (ok or error code).",
		}, []string{"op", "outcome"}),
		batchEntries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "chubby_log_batch_entries",
			Help:    "Log entries written per fsync.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "chubby_log_append_seconds",
			Help:    "Time to write and fsync one batch of log entries.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
		loopPause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "chubby_replica_loop_input_seconds",
			Help:    "Time the replica's loop spent on one input (a message batch, a tick, a proposal batch, a disk completion); nothing else reaches the replica meanwhile.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		parkedAcq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chubby_parked_acquires",
			Help: "Acquire calls parked waiting for a lock.",
		}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chubby_master_watches",
			Help: "GetMaster calls held as clients' master watches (wait_ms) on this replica.",
		}),
		eventsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chubby_events_sent_total",
			Help: "Events sent on KeepAlive replies (a resent event counts again).",
		}),
		tsHanded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chubby_oracle_timestamps_total",
			Help: "Timestamps the oracle handed out while this replica was master.",
		}),
		tsReserves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chubby_oracle_reservations_total",
			Help: "Windows of timestamps the master reserved through the log, by result (ok, failed).",
		}, []string{"result"}),
		invalidationWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "chubby_cache_invalidation_wait_seconds",
			Help:    "Time a change waited for caching sessions to acknowledge its cache invalidations.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12),
		}),
		leaseRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chubby_master_lease_refusals_total",
			Help: "Calls the master refused because its master lease had lapsed (no majority acknowledged it) and did not come back in time.",
		}),
	}
	cached := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chubby_cache_entries",
		Help: "(session, node) pairs the master tracks as cached by clients.",
	}, func() float64 { _, n := s.changes.stats(); return float64(n) })
	sessions := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chubby_sessions",
		Help: "Live sessions with a lease on this master.",
	}, func() float64 { n, _ := s.leases.count(); return float64(n) })
	parkedKA := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chubby_parked_keepalives",
		Help: "KeepAlive calls parked until their leases need extending.",
	}, func() float64 { _, n := s.leases.count(); return float64(n) })
	longest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chubby_replica_loop_longest_input_seconds",
		Help: "The longest time the replica's loop spent on one input since the process started.",
	}, func() float64 { return time.Duration(m.maxPause.Load()).Seconds() })
	xfer := func(f func(replica.TransferStats) uint64) func() float64 {
		return func() float64 { return float64(f(s.log.TransferStats())) }
	}
	chunksSent := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "chubby_snapshot_chunks_sent_total",
		Help: "Snapshot chunks sent to replicas catching up, resends included.",
	}, xfer(func(x replica.TransferStats) uint64 { return x.ChunksSent }))
	chunksStored := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "chubby_snapshot_chunks_stored_total",
		Help: "Snapshot chunks received from another replica and stored.",
	}, xfer(func(x replica.TransferStats) uint64 { return x.ChunksStored }))
	chunkResends := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "chubby_snapshot_transfer_resends_total",
		Help: "Times a snapshot transfer went back to the last chunk acknowledged after its receiver fell silent.",
	}, xfer(func(x replica.TransferStats) uint64 { return x.ChunkResends }))
	core := func(f func(vr.Stats) uint64) func() float64 {
		return func() float64 { return float64(f(s.log.CoreStats())) }
	}
	viewChanges := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "chubby_view_changes_total",
		Help: "Views this replica entered through a view change (a new master, or the attempt at one).",
	}, core(func(x vr.Stats) uint64 { return x.ViewChanges }))
	probes := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "chubby_view_change_probes_total",
		Help: "Pre-vote probes this replica sent: it heard no master for the view-change timeout, or found its process gone.",
	}, core(func(x vr.Stats) uint64 { return x.Probes }))
	gone := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "chubby_master_found_dead_total",
		Help: "Times a dial of the silent master's peer port was refused (its process is gone), so the view change started at once.",
	}, core(func(x vr.Stats) uint64 { return x.PeersGone }))
	applied := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chubby_applied_index",
		Help: "Index of the last log entry applied.",
	}, func() float64 { return float64(s.log.Applied()) })
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chubby_events_queued",
		Help: "Events queued for sessions and not yet acknowledged (replicated state).",
	}, func() float64 {
		var n int
		s.m.read(func(st *fs.State) { n = st.Counts().Events })
		return float64(n)
	})
	diskFailed := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chubby_disk_failed",
		Help: "1 once this replica's log write or fsync failed: it serves nothing and exits.",
	}, func() float64 {
		if s.log != nil && s.log.Err() != nil {
			return 1
		}
		return 0
	})
	master := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chubby_is_master",
		Help: "1 while this replica serves as master (it is the primary and has done its failover duties).",
	}, func() float64 {
		if s.serving.Load() {
			return 1
		}
		return 0
	})
	for _, c := range []prometheus.Collector{m.commands, m.batchEntries, m.fsync, m.loopPause, m.parkedAcq, m.watches, m.eventsSent, m.tsHanded, m.tsReserves, m.invalidationWait,
		m.leaseRefusals, cached, sessions, parkedKA, applied, longest, chunksSent, chunksStored, chunkResends, queued, diskFailed, master,
		viewChanges, probes, gone,
		newConfigCollector(s)} {
		reg.MustRegister(c)
	}
	return m
}

// configCollector is the configuration and its members' progress, read
// from the cell status at each scrape: a member removed from the
// configuration has no series in the next scrape.
type configCollector struct {
	s                                  *Server
	epoch, pending, voters, learners   *prometheus.Desc
	behind, lastContact, decisionsDesc *prometheus.Desc
}

func newConfigCollector(s *Server) *configCollector {
	return &configCollector{
		s: s,
		epoch: prometheus.NewDesc("chubby_config_epoch",
			"Epoch of the configuration in force on this replica.", nil, nil),
		pending: prometheus.NewDesc("chubby_config_change_pending",
			"1 while a voter change of the configuration is not yet known committed.", nil, nil),
		voters: prometheus.NewDesc("chubby_config_voters",
			"Voters in the configuration in force.", nil, nil),
		learners: prometheus.NewDesc("chubby_config_learners",
			"Learners (members that do not vote yet) in the configuration in force.", nil, nil),
		behind: prometheus.NewDesc("chubby_member_behind_entries",
			"Log entries a member is behind the master's commit (on the master only).", []string{"replica"}, nil),
		lastContact: prometheus.NewDesc("chubby_member_last_contact_seconds",
			"Time since the master last heard from a member (on the master only; -1: not since this master took over).", []string{"replica"}, nil),
		decisionsDesc: prometheus.NewDesc("chubby_membership_decisions_total",
			"Membership decisions this replica made: bootstrap, and the autopilot's and operators' configuration changes proposed.", nil, nil),
	}
}

func (c *configCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.epoch, c.pending, c.voters, c.learners, c.behind, c.lastContact, c.decisionsDesc} {
		ch <- d
	}
}

func (c *configCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.s.logReady:
	default:
		return // no log yet: no configuration
	}
	st := c.s.status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if st.ConfigEpoch != nil {
		gauge(c.epoch, float64(*st.ConfigEpoch))
	}
	if st.PendingConfig != nil {
		pending := 0.0
		if *st.PendingConfig != 0 {
			pending = 1
		}
		gauge(c.pending, pending)
	}
	var voters, learners int
	for _, r := range st.Replicas {
		switch deref(r.Membership) {
		case "voter":
			voters++
		case "learner":
			learners++
		}
		if r.Behind != nil {
			gauge(c.behind, float64(*r.Behind), r.Id)
		}
		if ms := r.LastContactMs; ms != nil {
			secs := -1.0
			if *ms >= 0 {
				secs = (time.Duration(*ms) * time.Millisecond).Seconds()
			}
			gauge(c.lastContact, secs, r.Id)
		}
	}
	gauge(c.voters, float64(voters))
	gauge(c.learners, float64(learners))
	ch <- prometheus.MustNewConstMetric(c.decisionsDesc, prometheus.CounterValue, float64(c.s.decisionCount.Load()))
}

func (m *metrics) observeBatch(entries, _ int, d time.Duration) {
	m.batchEntries.Observe(float64(entries))
	m.fsync.Observe(d.Seconds())
}

func (m *metrics) observePause(d time.Duration) {
	m.loopPause.Observe(d.Seconds())
	for {
		old := m.maxPause.Load()
		if int64(d) <= old || m.maxPause.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

func (m *metrics) parkedAcquire(delta float64) { m.parkedAcq.Add(delta) }

// masterWatch counts a GetMaster held as a master watch (delta ±1).
func (m *metrics) masterWatch(delta float64) { m.watches.Add(delta) }

func (m *metrics) command(op *fsm.Op, err *chubby.ChubbyError) {
	outcome := "ok"
	if err != nil {
		outcome = err.Code.String()
	}
	m.commands.WithLabelValues(opName(op), outcome).Inc()
}

func opName(op *fsm.Op) string {
	switch {
	case op.CreateSession != nil:
		return "create_session"
	case op.EndSession != nil:
		return "end_session"
	case op.Open != nil:
		return "open"
	case op.Close != nil:
		return "close"
	case op.SetContents != nil:
		return "set_contents"
	case op.DeleteNode != nil:
		return "delete"
	case op.Mkdir != nil:
		return "mkdir"
	case op.CreateFile != nil:
		return "create_file"
	case op.Acquire != nil:
		return "acquire"
	case op.Release != nil:
		return "release"
	case op.CancelWait != nil:
		return "cancel_wait"
	case op.Tick != nil:
		return "tick"
	case op.TrimEvents != nil:
		return "trim_events"
	case op.SetAcl != nil:
		return "set_acl"
	case op.InitAcl != nil:
		return "init_acl"
	case op.ReserveTimestamps != nil:
		return "reserve_timestamps"
	case op.Multi != nil:
		return "multi"
	}
	return "unknown"
}

package txn

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	chubbycell "github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/client/txn/sicheck"
)

// The bank test: accounts whose balances transfer transactions move
// between, run by worker processes (this test binary, re-executed) that
// the test kills with SIGKILL at the protocol's crash points and at random
// moments, while the cell's master is stopped twice. Every value written
// names its writer ("balance/start"), so each read says which transaction
// it saw, and the whole history is checked for snapshot isolation
// (sicheck) and for the bank's own invariants: every snapshot sums to the
// total, and the final balances are the initial ones plus every committed
// transfer, no more, no less.
//
// CHUBBY_BANK_SOAK=<transactions per worker> runs a longer history.

const (
	bankWorkerEnv = "TXN_BANK_WORKER" // set in a worker process: its config, JSON
	bankDir       = "/bank"
	bankCol       = "bal"
	bankInitial   = 1000
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(bankWorkerEnv); cfg != "" {
		os.Exit(bankWorker(cfg))
	}
	os.Exit(m.Run())
}

// bankConfig is what the test tells a worker process.
type bankConfig struct {
	Addrs    []string
	Accounts int
	Txns     int    // transactions to run, then exit
	Seed     uint64 // of its random choices
	Crash    string // "" or a point at which to pause for the kill
	CrashAt  int    // ... the CrashAt-th time it gets there
}

// bankRec is one line a worker prints: an intent before a commit is sent,
// a result after, a pause at a crash point, or its final stats.
type bankRec struct {
	Kind    string // "intent", "done", "pause", "stats"
	Start   int64
	Commit  int64
	Outcome string // done: committed, aborted, unknown
	Err     string `json:",omitempty"`
	Point   string `json:",omitempty"`
	Reads   []bankRead
	Writes  []bankRead // Writer is the transaction itself
	Stats   *Stats     `json:",omitempty"`
}

type bankRead struct {
	Key    string
	Writer int64
	Bal    int64
}

func account(i int) string { return fmt.Sprintf("acct/%02d", i) }

func parseBalance(v []byte) (bal, writer int64, err error) {
	b, w, ok := strings.Cut(string(v), "/")
	if !ok {
		return 0, 0, fmt.Errorf("balance %q", v)
	}
	if bal, err = strconv.ParseInt(b, 10, 64); err == nil {
		writer, err = strconv.ParseInt(w, 10, 64)
	}
	return bal, writer, err
}

func balance(bal, writer int64) []byte { return []byte(fmt.Sprintf("%d/%d", bal, writer)) }

// bankWorker is the main of a worker process.
func bankWorker(cfgJSON string) int {
	var cfg bankConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bank worker:", err)
		return 2
	}
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{Addrs: cfg.Addrs})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bank worker:", err)
		return 1
	}
	s, err := c.NewSession(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bank worker:", err)
		return 1
	}
	out := json.NewEncoder(os.Stdout) // unbuffered: a line is out before the next step
	var cur *bankRec
	reached := 0
	hook := func(p point, start, commit int64) {
		if string(p) != cfg.Crash {
			return
		}
		if reached++; reached < cfg.CrashAt {
			return
		}
		rec := *cur
		rec.Kind, rec.Point, rec.Commit = "pause", string(p), commit
		out.Encode(rec)
		select {} // until the test's SIGKILL
	}
	db, err := Open(ctx, s, bankDir, Config{LockWait: time.Minute, hook: hook, Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bank worker:", err)
		return 1
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	for range cfg.Txns {
		cur = &bankRec{}
		if rng.IntN(5) == 0 {
			bankSnapshot(ctx, db, cfg.Accounts, cur)
		} else {
			bankTransfer(ctx, db, rng, cfg.Accounts, cur, func() { r := *cur; r.Kind = "intent"; out.Encode(r) })
		}
		cur.Kind = "done"
		out.Encode(cur)
	}
	st := db.Stats()
	out.Encode(bankRec{Kind: "stats", Stats: &st})
	db.Close(ctx)
	s.Close(ctx)
	return 0
}

// bankSnapshot reads every account twice in one transaction.
func bankSnapshot(ctx context.Context, db *DB, n int, rec *bankRec) {
	tx, err := db.Begin(ctx)
	if err != nil {
		rec.Outcome, rec.Err = "aborted", err.Error()
		return
	}
	rec.Start = tx.Start()
	for pass := 0; pass < 2; pass++ {
		for i := range n {
			if !bankRead1(ctx, tx, account(i), rec) {
				return
			}
		}
	}
	rec.Commit, _ = tx.Commit(ctx)
	rec.Outcome = "committed"
}

// bankRead1 reads one account into rec; false (rec aborted) on error.
func bankRead1(ctx context.Context, tx *Txn, key string, rec *bankRec) bool {
	v, ok, err := tx.Get(ctx, key, bankCol)
	if err == nil && !ok {
		err = fmt.Errorf("account %s missing", key)
	}
	var bal, writer int64
	if err == nil {
		bal, writer, err = parseBalance(v)
	}
	if err != nil {
		rec.Outcome, rec.Err = "aborted", err.Error()
		return false
	}
	rec.Reads = append(rec.Reads, bankRead{Key: key, Writer: writer, Bal: bal})
	return true
}

// bankTransfer moves a random amount between two random accounts.
func bankTransfer(ctx context.Context, db *DB, rng *rand.Rand, n int, rec *bankRec, intent func()) {
	tx, err := db.Begin(ctx)
	if err != nil {
		rec.Outcome, rec.Err = "aborted", err.Error()
		return
	}
	rec.Start = tx.Start()
	a, b := rng.IntN(n), rng.IntN(n-1)
	if b >= a {
		b++
	}
	if !bankRead1(ctx, tx, account(a), rec) || !bankRead1(ctx, tx, account(b), rec) {
		return
	}
	amount := min(int64(1+rng.IntN(50)), rec.Reads[0].Bal)
	rec.Writes = []bankRead{
		{Key: account(a), Writer: tx.Start(), Bal: rec.Reads[0].Bal - amount},
		{Key: account(b), Writer: tx.Start(), Bal: rec.Reads[1].Bal + amount},
	}
	for _, w := range rec.Writes {
		tx.Set(w.Key, bankCol, balance(w.Bal, w.Writer))
	}
	intent()
	rec.Commit, err = tx.Commit(ctx)
	switch {
	case err == nil:
		rec.Outcome = "committed"
	case errors.Is(err, ErrCommitUnknown):
		rec.Outcome, rec.Err = "unknown", err.Error()
	default:
		rec.Outcome, rec.Err = "aborted", err.Error()
	}
}

// bankHistory gathers the workers' records by start timestamp.
type bankHistory struct {
	mu     sync.Mutex
	recs   map[int64]*bankRec
	killed map[string]int // by point ("random" for kills at a random moment)
	stats  Stats
}

func (h *bankHistory) add(r bankRec) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.Kind {
	case "stats":
		h.stats.RolledForward += r.Stats.RolledForward
		h.stats.RolledBack += r.Stats.RolledBack
		h.stats.Conflicts += r.Stats.Conflicts
		h.stats.Commits += r.Stats.Commits
		return
	case "pause":
		// Killed at a crash point: the commit point was passed exactly
		// when it paused after it.
		if r.Point == string(pointPrimaryCommited) {
			r.Outcome = "committed"
		} else {
			r.Outcome, r.Commit = "aborted", 0
		}
		h.killed[r.Point]++
	case "intent":
		r.Outcome = "unknown" // until its result arrives
	}
	if r.Start != 0 {
		h.recs[r.Start] = &r
	}
}

// bankRun is one run of worker processes against a cell.
type bankRun struct {
	t        *testing.T
	db       *DB // the test's own worker: settles what killed workers leave
	settling sync.WaitGroup
	cfg      bankConfig
	hist     *bankHistory
	rng      *rand.Rand
	mu       sync.Mutex
	started  int
	maxProcs int
}

// start launches one worker process with a crash plan and returns a
// channel closed when it has exited (or been killed) and its output read.
func (b *bankRun) start(ctx context.Context) <-chan struct{} {
	b.mu.Lock()
	cfg := b.cfg
	cfg.Seed = b.rng.Uint64()
	randomKill := time.Duration(0)
	// Every crash point in turn, so that each is hit in every run; the
	// last two workers finish, so that the run ends.
	switch p := b.started; {
	case p >= b.maxProcs-2:
	case p%4 == 0:
		cfg.Crash, cfg.CrashAt = string(pointPrewritten), 1+b.rng.IntN(cfg.Txns/2)
	case p%4 == 1:
		cfg.Crash, cfg.CrashAt = string(pointPrimaryCommited), 1+b.rng.IntN(cfg.Txns/2)
	case p%4 == 2:
		cfg.Crash, cfg.CrashAt = string(pointResolving), 1
	default:
		randomKill = time.Duration(500+b.rng.IntN(3000)) * time.Millisecond
	}
	b.started++
	b.mu.Unlock()
	js, _ := json.Marshal(cfg)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), bankWorkerEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	done := make(chan struct{})
	if randomKill > 0 {
		timer := time.AfterFunc(randomKill, func() {
			b.hist.mu.Lock()
			b.hist.killed["random"]++
			b.hist.mu.Unlock()
			cmd.Process.Kill()
		})
		defer func() { go func() { <-done; timer.Stop() }() }()
	}
	go func() {
		defer close(done)
		var open int64 // start of an intent without its result
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r bankRec
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				b.t.Errorf("worker printed %q: %v", sc.Text(), err)
				continue
			}
			b.hist.add(r)
			switch r.Kind {
			case "intent":
				open = r.Start
			case "done", "pause":
				open = 0
			}
			if r.Kind == "pause" {
				cmd.Process.Kill() // SIGKILL
			}
		}
		cmd.Wait()
		if open != 0 {
			// Killed with a commit in flight: learn its outcome now,
			// before garbage collection may remove the record.
			b.settling.Go(func() { b.settleUnknown(ctx, open) })
		}
	}()
	return done
}

// settleUnknown learns the outcome of the killed transaction that
// started at start: a read of its primary resolves the lock once the dead
// worker's session has expired, and the primary then tells.
func (b *bankRun) settleUnknown(ctx context.Context, start int64) {
	b.hist.mu.Lock()
	r := b.hist.recs[start]
	b.hist.mu.Unlock()
	primary := bankPrimary(r)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if tx, err := b.db.Begin(ctx); err == nil {
			tx.Get(ctx, primary.row, primary.col)
		}
		if c, known, committed := b.db.outcome(ctx, primary, start); known {
			b.hist.mu.Lock()
			r.Outcome, r.Commit = "aborted", 0
			if committed {
				r.Outcome, r.Commit = "committed", c
			}
			b.hist.mu.Unlock()
			return
		}
	}
}

// bankPrimary is a transfer's primary: its first written cell.
func bankPrimary(r *bankRec) cell {
	p := cell{r.Writes[0].Key, bankCol}
	if r.Writes[1].Key < p.row {
		p.row = r.Writes[1].Key
	}
	return p
}

func TestBank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a five-replica cell and worker processes")
	}
	txns := 60
	if v := os.Getenv("CHUBBY_BANK_SOAK"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			t.Fatalf("CHUBBY_BANK_SOAK=%q: want transactions per worker, at least 10", v)
		}
		txns = n
	}
	const accounts, concurrent, procs = 8, 4, 16
	rc := celltest.StartStaticWith(t, 5, func(c *chubbycell.Config) { c.Lease = 2 * time.Second })
	rc.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The accounts, by one transaction.
	s := cellSession(t, rc.Addrs()...)
	db := cellDB(t, s, bankDir, Config{LockWait: time.Minute})
	init := begin(t, db)
	for i := range accounts {
		init.Set(account(i), bankCol, balance(bankInitial, init.Start()))
	}
	initCommit := mustCommit(t, init)

	hist := &bankHistory{recs: map[int64]*bankRec{}, killed: map[string]int{}}
	hist.recs[init.Start()] = &bankRec{Kind: "done", Start: init.Start(), Commit: initCommit, Outcome: "committed"}
	for i := range accounts {
		hist.recs[init.Start()].Writes = append(hist.recs[init.Start()].Writes, bankRead{Key: account(i), Writer: init.Start(), Bal: bankInitial})
	}
	run := &bankRun{t: t, db: db, hist: hist, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), maxProcs: procs,
		cfg: bankConfig{Addrs: rc.Addrs(), Accounts: accounts, Txns: txns}}

	// Workers: concurrent at a time, each replaced when it ends, procs in
	// all; the master is stopped after a third and two thirds of them.
	gcCtx, stopGC := context.WithCancel(ctx)
	gcDone := make(chan struct{})
	go func() { defer close(gcDone); db.GCLoop(gcCtx, 300*time.Millisecond, 5*time.Second) }()
	var wg sync.WaitGroup
	slots := make(chan struct{}, concurrent)
	stopped := []int{}
	for p := range procs {
		slots <- struct{}{}
		if p == procs/3 || p == 2*procs/3 {
			m := rc.Master(stopped...)
			t.Logf("stopping the master (replica %d) with %d workers started", m+1, p)
			rc.Stop(m)
			stopped = append(stopped, m)
		}
		done := run.start(ctx)
		wg.Go(func() { <-done; <-slots })
	}
	wg.Wait()
	run.settling.Wait()
	stopGC()
	<-gcDone
	if f, err := db.floor(ctx); err != nil || f == 0 {
		t.Errorf("garbage collection never ran during the test (floor %d, %v)", f, err)
	} else {
		t.Logf("garbage collected below %d while the workers ran", f)
	}
	checkBank(t, ctx, db, hist, accounts)
}

// checkBank settles every lock left (the dead workers' sessions have
// expired by now or will within their lease), then checks the history.
func checkBank(t *testing.T, ctx context.Context, db *DB, h *bankHistory, accounts int) {
	final := begin(t, db)
	finalBal := map[string]bankRead{}
	var sum int64
	for i := range accounts {
		v := mustGet(t, final, account(i), bankCol)
		bal, writer, err := parseBalance([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		finalBal[account(i)] = bankRead{Key: account(i), Writer: writer, Bal: bal}
		sum += bal
	}
	// Every lock of a dead worker is resolved (the final read resolved
	// those on the accounts; nothing else is ever locked).
	keys, err := db.Store().Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		r, _, err := db.Store().Read(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range r.Cols {
			if c.Lock != nil {
				t.Errorf("%s:%s still locked by %d of worker %s", k, name, c.Lock.Start, c.Lock.Worker)
			}
		}
	}
	// Unknown outcomes (killed at random, or a commit that could not
	// learn) are read from their primaries.
	unknown := 0
	for _, r := range h.recs {
		if r.Outcome != "unknown" {
			continue
		}
		unknown++
		c, known, committed := db.outcome(ctx, bankPrimary(r), r.Start)
		switch {
		case !known:
			t.Errorf("transaction %d: outcome still unknown", r.Start)
		case committed:
			r.Outcome, r.Commit = "committed", c
		default:
			r.Outcome = "aborted"
		}
	}
	var txs []sicheck.Txn
	outcomes := map[string]int{}
	expect := map[string]int64{}
	for i := range accounts {
		expect[account(i)] = bankInitial
	}
	snapshots := 0
	for _, r := range h.recs {
		outcomes[r.Outcome]++
		st := sicheck.Txn{Start: r.Start, Commit: r.Commit}
		switch r.Outcome {
		case "committed":
			st.Outcome = sicheck.Committed
		case "aborted":
			st.Outcome = sicheck.Aborted
		}
		for _, rd := range r.Reads {
			st.Reads = append(st.Reads, sicheck.Read{Key: rd.Key, Writer: rd.Writer})
		}
		for _, w := range r.Writes {
			st.Writes = append(st.Writes, w.Key)
		}
		txs = append(txs, st)
		if len(r.Writes) == 0 && len(r.Reads) == 2*accounts {
			snapshots++
			var total int64
			for _, rd := range r.Reads[:accounts] {
				total += rd.Bal
			}
			if total != int64(accounts*bankInitial) {
				t.Errorf("snapshot %d sums to %d, not %d", r.Start, total, accounts*bankInitial)
			}
		}
		if r.Outcome == "committed" && r.Start != 0 && len(r.Reads) == 2 && len(r.Writes) == 2 {
			for i, w := range r.Writes {
				expect[w.Key] += w.Bal - r.Reads[i].Bal
			}
		}
	}
	for _, a := range sicheck.Check(txs) {
		t.Errorf("anomaly: %v", a)
	}
	if sum != int64(accounts*bankInitial) {
		t.Errorf("final balances sum to %d, not %d", sum, accounts*bankInitial)
	}
	for k, want := range expect {
		if got := finalBal[k].Bal; got != want {
			t.Errorf("%s: final balance %d, but the committed transfers make it %d", k, got, want)
		}
	}
	h.stats.RolledForward += db.Stats().RolledForward
	h.stats.RolledBack += db.Stats().RolledBack
	t.Logf("%d transactions (%d snapshots): %v; %d unknown until the end; killed %v; locks of others rolled forward %d, back %d (by the workers that finished and the final read)",
		len(h.recs), snapshots, outcomes, unknown, h.killed, h.stats.RolledForward, h.stats.RolledBack)
	for _, p := range []point{pointPrewritten, pointPrimaryCommited, pointResolving} {
		if h.killed[string(p)] == 0 {
			t.Errorf("no worker was killed at %s", p)
		}
	}
	if outcomes["committed"] < 10 {
		t.Errorf("only %d transactions committed: the test proves little", outcomes["committed"])
	}
}

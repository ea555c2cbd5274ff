package replica

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/server"

	gr "github.com/chubbygo/chubby/gen/replica"
	"github.com/chubbygo/chubby/gen/replica/replica"
	"github.com/chubbygo/chubby/replica/vr"
	"github.com/chubbygo/chubby/rpc"
)

// Transport limits.
const (
	// peerQueue bounds the message batches waiting for one peer; past it
	// new ones are dropped (the protocol retransmits).
	peerQueue = 256
	// maxDeliver bounds the messages of one Deliver call.
	maxDeliver = 256
	// maxDeliverBytes bounds the messages of one Deliver call, by
	// msgBytes; a batch always takes one message, and no message is
	// larger than vr.MaxMessageBytes (entries) or MaxSnapshotChunkBytes
	// (a snapshot chunk) plus its fields.
	maxDeliverBytes = 16 << 20
	// MaxPeerPayloadBytes bounds one Deliver request on the server: a
	// batch of maxDeliverBytes plus a message's worth, with room for the
	// framing. Snapshots travel in chunks, so this bounds no state.
	MaxPeerPayloadBytes = 32 << 20
	// maxConfigBytes bounds an encoded configuration in a snapshot's
	// metadata: MaxMembers members of MaxMemberAddr bytes and their ids.
	maxConfigBytes = 64 + vr.MaxMembers*(vr.MaxMemberAddr+16)
	deliverTimeout = 2 * time.Second
	// replyWait bounds how long a Deliver waits for the receiver to
	// process what it brought, so that the answers ride back on it.
	replyWait = 20 * time.Millisecond
	// maxReplyBytes bounds the entry and snapshot bytes that ride back on
	// one Deliver answer; more goes as a call of its own.
	maxReplyBytes = 1 << 20
)

// Receiver takes messages that arrived for this replica. done, if not nil,
// is called once they have been processed: stepped, and the Ready that
// followed carried out (its fsync and its sends), or dropped.
type Receiver func(msgs []vr.Message, done func())

// PeerTransport carries protocol messages over Kitex (idl/replica.thrift):
// one sender goroutine per peer with a bounded queue, at most one Deliver
// call in flight per peer (batches form while it is out), and a server
// that hands what arrives to a replica.
//
// A Deliver's answer carries back what the receiver had for the sender
// once it processed the batch (PrepareOK for Prepare): the server side
// registers a reply slot for the sender while the batch is processed, and
// Send puts messages for that sender in the slot instead of its queue.
//
// The peers follow the configuration (SetPeers); a sender this replica
// does not know yet names its own address on each Deliver, and the
// answers to it go there (Learn), which is how a replica being added hears
// its primary before its log names anyone.
type PeerTransport struct {
	cell     string
	self     uint64
	selfAddr string
	log      *slog.Logger
	stop     chan struct{}
	wg       sync.WaitGroup
	recv     atomic.Pointer[Receiver]
	tls      *tls.Config // nil: plaintext

	mu      sync.Mutex
	peers   map[uint64]*peerSender
	waiting map[uint64]*replySlot // by sender: a Deliver being processed
}

// replySlot collects the messages for a peer whose Deliver is being
// processed.
type replySlot struct {
	msgs  []vr.Message
	bytes int
}

// SetReceiver names where the answers that come back on Deliver calls go
// (the local replica). Until it is set they are dropped.
func (t *PeerTransport) SetReceiver(fn Receiver) { t.recv.Store(&fn) }

type peerSender struct {
	id    uint64
	addr  string
	cli   replica.Client
	queue chan []vr.Message
	quit  chan struct{} // closed when the peer leaves the transport
	// closeConns closes the client's connections; the send loop calls it
	// as it ends.
	closeConns func() error
	checking   atomic.Bool // a CheckPeer dial is under way
}

// maxLearned bounds the peers a transport knows beyond a configuration's.
const maxLearned = vr.MaxMembers

// NewPeerTransport makes a transport from replica self to peers (id → peer
// address; self's own address, if in it, is named to the others so that
// a replica that does not know self yet can answer).
//
// tlsCfg, if set, is the client configuration of every connection to a
// peer (see package rpc/tlsconf): then only a replica whose certificate
// the cell's CA signed receives anything. nil: plaintext.
func NewPeerTransport(cell string, self uint64, peers map[uint64]string, log *slog.Logger, tlsCfg *tls.Config) (*PeerTransport, error) {
	if log == nil {
		log = slog.Default()
	}
	t := &PeerTransport{cell: cell, self: self, selfAddr: peers[self], log: log, tls: tlsCfg, peers: make(map[uint64]*peerSender),
		stop: make(chan struct{}), waiting: make(map[uint64]*replySlot)}
	if err := t.SetPeers(peers); err != nil {
		return nil, err
	}
	return t, nil
}

// SetPeers makes the transport's peers exactly peers (self skipped): new
// ones get a sender, gone ones lose theirs (their queued messages are
// dropped), and a changed address gets a new sender.
func (t *PeerTransport) SetPeers(peers map[uint64]string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, p := range t.peers {
		if addr, ok := peers[id]; !ok || addr != p.addr {
			close(p.quit)
			delete(t.peers, id)
		}
	}
	for id, addr := range peers {
		if id == t.self || t.peers[id] != nil || addr == "" {
			continue
		}
		if err := t.addLocked(id, addr); err != nil {
			return err
		}
	}
	return nil
}

// Learn adds peer id at addr unless the transport knows it already: a
// sender outside the configuration this replica knows (see PeerTransport).
func (t *PeerTransport) Learn(id uint64, addr string) {
	if id == 0 || id == t.self || addr == "" || len(addr) > vr.MaxMemberAddr {
		return
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.peers[id] != nil || len(t.peers) >= vr.MaxMembers+maxLearned {
		return
	}
	if err := t.addLocked(id, addr); err != nil {
		t.log.Warn("replica transport: cannot reach a new peer", "peer", id, "addr", addr, "err", err)
	}
}

func (t *PeerTransport) addLocked(id uint64, addr string) error {
	opts, closeConns, err := rpc.ClientOptionsCloser(rpc.ClientConfig{Addrs: []string{addr}, ConnectTimeout: 200 * time.Millisecond, MaxInFlight: 4,
		MaxPayloadBytes: MaxPeerPayloadBytes, TLS: t.tls, GoNet: true})
	if err != nil {
		return fmt.Errorf("peer %d at %s: %w", id, addr, err)
	}
	cli, err := replica.NewClient("chubby-replica", opts...)
	if err != nil {
		return fmt.Errorf("peer %d at %s: %w", id, addr, err)
	}
	p := &peerSender{id: id, addr: addr, cli: cli, queue: make(chan []vr.Message, peerQueue), quit: make(chan struct{}), closeConns: closeConns}
	t.peers[id] = p
	t.wg.Add(1)
	go t.sendLoop(p)
	return nil
}

// Peers returns the transport's peers and their addresses.
func (t *PeerTransport) Peers() map[uint64]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[uint64]string, len(t.peers))
	for id, p := range t.peers {
		out[id] = p.addr
	}
	return out
}

// Send implements Transport.
func (t *PeerTransport) Send(msgs []vr.Message) {
	var by map[uint64][]vr.Message
	for _, m := range msgs {
		if by == nil {
			by = make(map[uint64][]vr.Message)
		}
		by[m.To] = append(by[m.To], m)
	}
	for to, ms := range by {
		t.mu.Lock()
		p, ok := t.peers[to]
		t.mu.Unlock()
		if !ok {
			continue
		}
		if t.reply(to, ms) {
			continue
		}
		select {
		case p.queue <- ms:
		default: // the peer is slow or gone: drop, the protocol retransmits
		}
	}
}

// reply puts ms in the reply slot of peer to, if a Deliver from it is being
// processed and the answer has room; it reports whether it did.
func (t *PeerTransport) reply(to uint64, ms []vr.Message) bool {
	n := batchBytes(ms)
	t.mu.Lock()
	defer t.mu.Unlock()
	slot := t.waiting[to]
	if slot == nil || len(slot.msgs)+len(ms) > maxDeliver || slot.bytes+n > maxReplyBytes {
		return false
	}
	slot.msgs = append(slot.msgs, ms...)
	slot.bytes += n
	return true
}

func batchBytes(ms []vr.Message) int {
	n := 0
	for i := range ms {
		n += msgBytes(&ms[i])
	}
	return n
}

// msgBytes approximates a message's size by its payload.
func msgBytes(m *vr.Message) int {
	n := 64 + len(m.SnapshotData) + 16*len(m.Runs)
	for _, e := range m.Entries {
		n += 32 + len(e.Data)
	}
	return n
}

// openSlot opens the reply slot of peer from; it fails when one is open
// already (a second Deliver from it in flight: its answers go as calls).
func (t *PeerTransport) openSlot(from uint64) *replySlot {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiting[from] != nil {
		return nil
	}
	slot := &replySlot{}
	t.waiting[from] = slot
	return slot
}

// closeSlot closes the slot and returns what it collected.
func (t *PeerTransport) closeSlot(from uint64, slot *replySlot) []vr.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiting[from] == slot {
		delete(t.waiting, from)
	}
	return slot.msgs
}

// checkTimeout bounds CheckPeer's dial: a peer that does not answer by
// then is not known to be gone (only a refusal is evidence).
const checkTimeout = 200 * time.Millisecond

// CheckPeer checks, on a goroutine of its own, whether anything listens on
// peer id's address, and calls gone if the connection was refused: nothing
// listens there, so the peer's process is gone (kill -9 closes its
// sockets at once). A connection that opens, or a dial that times out
// (a partition, a paused process, whose kernel still accepts), is no
// evidence and calls nothing. At most one check per peer is under way.
func (t *PeerTransport) CheckPeer(id uint64, gone func()) {
	t.mu.Lock()
	p := t.peers[id]
	t.mu.Unlock()
	if p == nil || !p.checking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer p.checking.Store(false)
		conn, err := net.DialTimeout("tcp", p.addr, checkTimeout)
		if err == nil {
			// Close with a reset, not a FIN: the peer's kernel frees its
			// side at once, with nothing left for the peer to close.
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			conn.Close()
			return
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			gone()
		}
	}()
}

// Close stops the senders.
func (t *PeerTransport) Close() {
	close(t.stop)
	t.wg.Wait()
}

func (t *PeerTransport) sendLoop(p *peerSender) {
	defer t.wg.Done()
	defer p.closeConns()
	var lastErr time.Time
	var batch []vr.Message // reused: Deliver has encoded it when it returns
	for {
		clear(batch) // drop references to the last batch's entries
		batch = batch[:0]
		select {
		case <-t.stop:
			return
		case <-p.quit:
			return
		case ms := <-p.queue:
			batch = append(batch, ms...)
		}
		size := batchBytes(batch)
	more:
		for len(batch) < maxDeliver && size < maxDeliverBytes {
			select {
			case ms := <-p.queue:
				batch = append(batch, ms...)
				size += batchBytes(ms)
			default:
				break more
			}
		}
		// One Ready's messages for a peer can exceed a call's bound on
		// their own (eight Prepares of 4 MiB): send them in calls of at
		// most maxDeliverBytes (and one message more).
		for rest := batch; len(rest) > 0; {
			n, size := 0, 0
			for n < len(rest) && (n == 0 || size+msgBytes(&rest[n]) <= maxDeliverBytes) {
				size += msgBytes(&rest[n])
				n++
			}
			t.deliver(p, rest[:n], &lastErr)
			rest = rest[n:]
		}
	}
}

// deliver sends one batch to p and hands the answers that ride back to
// the local replica.
func (t *PeerTransport) deliver(p *peerSender, batch []vr.Message, lastErr *time.Time) {
	wire := messagesToWire(batch)
	ctx, cancel := context.WithTimeout(context.Background(), deliverTimeout)
	// Naming the host per call skips Kitex's dial-retry loop (and its
	// warnings): a peer that is down just misses this batch.
	answers, err := p.cli.Deliver(ctx, t.cell, int64(t.self), wire, t.selfAddr, callopt.WithRPCTimeout(deliverTimeout), callopt.WithHostPort(p.addr))
	cancel()
	if err == nil && len(answers) > 0 {
		t.receive(p.id, answers)
	}
	if err != nil && time.Since(*lastErr) > 5*time.Second {
		*lastErr = time.Now()
		t.log.Debug("replica transport: deliver failed (messages dropped; the protocol retransmits)",
			"peer", p.id, "addr", p.addr, "err", err)
	}
}

// receive hands the answers that came back from peer on a Deliver to the
// local replica, checked like messages that arrive on the server.
func (t *PeerTransport) receive(peer uint64, answers []*gr.Message) {
	fn := t.recv.Load()
	if fn == nil || len(answers) > maxDeliver*4 {
		return
	}
	if out := messagesFromWire(answers, peer, t.self); len(out) > 0 {
		(*fn)(out, nil)
	}
}

// messagesFromWire converts what peer from sent, dropping (and keeping the
// rest) what is malformed, claims another sender, or, when to is not 0, is
// addressed to another replica.
func messagesFromWire(ws []*gr.Message, from, to uint64) []vr.Message {
	out := make([]vr.Message, 0, len(ws))
	for _, w := range ws {
		m, err := messageFromWire(w)
		if err != nil || m.From != from || (to != 0 && m.To != to) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// PeerServerConfig configures the server of the peer port.
type PeerServerConfig struct {
	Cell     string
	Listen   string
	Listener net.Listener
	Logger   *slog.Logger
	// Deliver receives validated messages from a peer.
	Deliver Receiver
	// Transport, if set, is this replica's transport: the answers to a
	// Deliver ride back on it (see PeerTransport), and messages addressed
	// to another id than its own are refused before the core sees them
	// (they are for a replica that had this address before).
	Transport *PeerTransport
	// Known reports whether messages from an id are taken (others are
	// refused): a member's, or anyone's on a replica that cannot judge
	// yet (one being added).
	Known func(id uint64) bool
	// TLS, if set, is the server configuration of the peer port; it must
	// require a certificate of the cell's CA (tlsconf.RequireCert), so
	// that nobody else can send replica traffic. nil: plaintext.
	TLS *tls.Config
}

// NewPeerServer builds the Kitex server of the peer port. Run it with Run;
// stop it with Stop.
func NewPeerServer(cfg PeerServerConfig) (server.Server, error) {
	return rpc.NewServer(rpc.ServerConfig{
		Listen:          cfg.Listen,
		Listener:        cfg.Listener,
		MaxConnections:  256,
		MaxPayloadBytes: MaxPeerPayloadBytes,
		Logger:          cfg.Logger,
		TLS:             cfg.TLS,
		// Not netpoll: its poller costs an idle cell more in Go's sysmon
		// wakeups than the heartbeats themselves (rpc.ServerConfig.GoNet).
		GoNet: true,
	}, func(opts ...server.Option) server.Server { return replica.NewServer(&peerHandler{cfg: cfg}, opts...) })
}

type peerHandler struct{ cfg PeerServerConfig }

var errPeer = errors.New("replica: refused")

func (h *peerHandler) Deliver(ctx context.Context, cell string, from int64, msgs []*gr.Message, fromAddr string) ([]*gr.Message, error) {
	if cell != h.cfg.Cell {
		return nil, &gr.ReplicaError{Message: fmt.Sprintf("this replica belongs to cell %q, not %q", h.cfg.Cell, cell)}
	}
	if from <= 0 || (h.cfg.Known != nil && !h.cfg.Known(uint64(from))) {
		return nil, &gr.ReplicaError{Message: fmt.Sprintf("replica %d is not a member", from)}
	}
	if len(msgs) > maxDeliver*4 {
		return nil, &gr.ReplicaError{Message: fmt.Sprintf("%d messages in one call, more than %d", len(msgs), maxDeliver*4)}
	}
	t := h.cfg.Transport
	var self uint64 // 0: messages to any id go to the core, which checks them
	if t != nil {
		self = t.self
	}
	out := messagesFromWire(msgs, uint64(from), self)
	if len(out) == 0 {
		if self != 0 && len(msgs) > 0 {
			// For a replica that had this address before (a wiped machine
			// that rejoined under a new id): the sender's configuration
			// still names it. The sender's transport drops the batch.
			return nil, &gr.ReplicaError{Message: fmt.Sprintf("this address serves replica %d: messages for another id are not delivered", self)}
		}
		return nil, nil
	}
	if t != nil {
		t.Learn(uint64(from), fromAddr)
	}
	var slot *replySlot
	if t != nil {
		slot = t.openSlot(uint64(from))
	}
	if slot == nil {
		h.cfg.Deliver(out, nil)
		return nil, nil
	}
	done := make(chan struct{})
	h.cfg.Deliver(out, func() { close(done) })
	timer := time.NewTimer(replyWait)
	select {
	case <-done:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	return messagesToWire(t.closeSlot(uint64(from), slot)), nil
}

// messagesToWire converts ms with three allocations (the pointers, the
// messages, the entries) whatever their number.
func messagesToWire(ms []vr.Message) []*gr.Message {
	if len(ms) == 0 {
		return nil
	}
	n := 0
	for i := range ms {
		n += len(ms[i].Entries)
	}
	wire := make([]*gr.Message, len(ms))
	msgs := make([]gr.Message, len(ms))
	entries := make([]gr.Entry, n)
	for i := range ms {
		messageToWire(&msgs[i], &ms[i], entries[:len(ms[i].Entries)])
		entries = entries[len(ms[i].Entries):]
		wire[i] = &msgs[i]
	}
	return wire
}

// messageToWire fills w from m; es holds room for m's entries.
func messageToWire(w *gr.Message, m *vr.Message, es []gr.Entry) {
	*w = gr.Message{
		Type: int8(m.Type), From: int64(m.From), To: int64(m.To), View: int64(m.View),
		Op: int64(m.Op), OpView: int64(m.OpView), Commit: int64(m.Commit), PrevOp: int64(m.PrevOp),
		PrevView: int64(m.PrevView), LastNormalView: int64(m.LastNormalView), StartOp: int64(m.StartOp),
		Stamp: int64(m.Stamp), Normal: m.Normal, Reject: m.Reject, Granted: m.Granted, Final: m.Final,
		SnapshotData: m.SnapshotData,
	}
	if len(m.Entries) > 0 {
		w.Entries = make([]*gr.Entry, len(m.Entries))
		for i, e := range m.Entries {
			es[i] = gr.Entry{Index: int64(e.Index), View: int64(e.View), Type: int8(e.Type), Data: e.Data}
			w.Entries[i] = &es[i]
		}
	}
	if len(m.Runs) > 0 {
		w.Runs = make([]*gr.Run, len(m.Runs))
		for i, r := range m.Runs {
			w.Runs[i] = &gr.Run{View: int64(r.View), Last: int64(r.Last)}
		}
	}
	if m.Snapshot != nil {
		s := &gr.SnapshotMeta{Index: int64(m.Snapshot.Index), View: int64(m.Snapshot.View),
			Members: make([]*gr.Member, len(m.Snapshot.Members)), Config: vr.EncodeConfig(m.Snapshot.Config())}
		for i, x := range m.Snapshot.Members {
			// The peer IDL's Member has one address: both travel packed
			// in it, as they always have (vr.Member.PackedAddr).
			s.Members[i] = &gr.Member{Id: int64(x.ID), Addr: x.PackedAddr()}
		}
		w.Snapshot = s
	}
	if c := m.Chunk; c != nil {
		w.Chunk = &gr.SnapshotChunk{N: int64(c.N), Chunks: int64(c.Chunks), Length: int64(c.Length), Sum: int64(c.Sum)}
	}
}

// messageFromWire converts and checks what the wire format alone can
// check (no negative numbers, no nil elements); the core validates the
// protocol meaning.
func messageFromWire(w *gr.Message) (vr.Message, error) {
	if w == nil {
		return vr.Message{}, errPeer
	}
	nums := []int64{w.From, w.To, w.View, w.Op, w.OpView, w.Commit, w.PrevOp, w.PrevView, w.LastNormalView, w.StartOp, w.Stamp}
	for _, n := range nums {
		if n < 0 {
			return vr.Message{}, errPeer
		}
	}
	if w.Type <= 0 {
		return vr.Message{}, errPeer
	}
	m := vr.Message{
		Type: vr.MsgType(w.Type), From: uint64(w.From), To: uint64(w.To), View: uint64(w.View),
		Op: uint64(w.Op), OpView: uint64(w.OpView), Commit: uint64(w.Commit), PrevOp: uint64(w.PrevOp),
		PrevView: uint64(w.PrevView), LastNormalView: uint64(w.LastNormalView), StartOp: uint64(w.StartOp),
		Stamp: uint64(w.Stamp), Normal: w.Normal, Reject: w.Reject, Granted: w.Granted, Final: w.Final,
		SnapshotData: w.SnapshotData,
	}
	if len(w.Entries) > 0 {
		m.Entries = make([]vr.Entry, len(w.Entries))
		for i, e := range w.Entries {
			if e == nil || e.Index < 0 || e.View < 0 || e.Type <= 0 {
				return vr.Message{}, errPeer
			}
			m.Entries[i] = vr.Entry{Index: uint64(e.Index), View: uint64(e.View), Type: vr.EntryType(e.Type), Data: e.Data}
		}
	}
	if len(w.Runs) > 0 {
		m.Runs = make([]vr.Run, len(w.Runs))
		for i, r := range w.Runs {
			if r == nil || r.View < 0 || r.Last < 0 {
				return vr.Message{}, errPeer
			}
			m.Runs[i] = vr.Run{View: uint64(r.View), Last: uint64(r.Last)}
		}
	}
	if s := w.Snapshot; s != nil {
		if s.Index < 0 || s.View < 0 || len(s.Members) > vr.MaxMembers || len(s.Config) > maxConfigBytes {
			return vr.Message{}, errPeer
		}
		meta := &vr.SnapshotMeta{Index: uint64(s.Index), View: uint64(s.View)}
		for _, x := range s.Members {
			if x == nil || x.Id <= 0 {
				return vr.Message{}, errPeer
			}
			client, peer := vr.UnpackAddr(x.Addr)
			meta.Members = append(meta.Members, vr.Member{ID: uint64(x.Id), ClientAddr: client, PeerAddr: peer})
		}
		if s.IsSetConfig() {
			c, err := vr.DecodeConfig(s.Config)
			if err != nil {
				return vr.Message{}, errPeer
			}
			meta.SetConfig(c)
		}
		m.Snapshot = meta
	}
	if c := w.Chunk; c != nil {
		const u32 = 1<<32 - 1
		if c.N < 0 || c.N > u32 || c.Chunks < 0 || c.Chunks > u32 || c.Length < 0 || c.Sum < 0 || c.Sum > u32 {
			return vr.Message{}, errPeer
		}
		m.Chunk = &vr.SnapshotChunk{N: uint32(c.N), Chunks: uint32(c.Chunks), Length: uint64(c.Length), Sum: uint32(c.Sum)}
	}
	return m, nil
}

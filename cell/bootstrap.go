package cell

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/chubbygo/chubby/cell/discovery"
	"github.com/chubbygo/chubby/replica/vr"
	"github.com/chubbygo/chubby/rpc/tlsconf"
)

// How a replica with discovery comes to be in a cell: its identity, its
// gossip, and the plan for an empty disk (bootstrap alone, bootstrap with
// the first N, or wait to be added).

// identityMeta is the storage key of the replica's identity.
const identityMeta = "cell/identity"

// identity is who this replica's data directory is: an id chosen at
// random when the directory was made, and a random data identity gossiped
// with it. A wiped directory gets new ones, so it rejoins as a new
// replica, never as the one whose log it lost (a voter that lost its log
// could otherwise count in a quorum for entries it no longer holds).
type identity struct {
	ID     uint64
	DataID string
}

// loadIdentity reads the data directory's identity, making one on first
// use. With discovery the replica id comes from it; otherwise it keeps the
// configured id, and only the data identity is new.
func (s *Server) loadIdentity(autoID bool) error {
	b, err := s.st.GetMeta(identityMeta)
	if err != nil {
		return err
	}
	if b != nil {
		id, dataID, err := decodeIdentity(b)
		if err != nil {
			return err
		}
		if !autoID && id != s.cfg.ID {
			return fmt.Errorf("data directory %s belongs to replica %d, not %d", s.cfg.DataDir, id, s.cfg.ID)
		}
		s.cfg.ID, s.dataID = id, dataID
		return nil
	}
	var r [24]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	if autoID {
		// Below 2^53, so that every JSON reader holds it exactly.
		s.cfg.ID = binary.BigEndian.Uint64(r[:8])>>11 | 1
	}
	s.dataID = hex.EncodeToString(r[8:])
	return s.st.SetMeta(identityMeta, []byte(strconv.FormatUint(s.cfg.ID, 10)+" "+s.dataID))
}

func decodeIdentity(b []byte) (uint64, string, error) {
	var id uint64
	var dataID string
	if _, err := fmt.Sscanf(string(b), "%d %s", &id, &dataID); err != nil || id == 0 || len(dataID) != 32 {
		return 0, "", fmt.Errorf("corrupt replica identity %q", b)
	}
	return id, dataID, nil
}

// ShiftPort returns addr with its port moved by delta (the default peer
// and gossip ports follow the client port; chubbyd dev lays its replicas
// out the same way).
func ShiftPort(addr string, delta int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p+delta <= 0 || p+delta > 65535 {
		return "", fmt.Errorf("address %s: no port %s%+d", addr, port, delta)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+delta)), nil
}

// startDiscovery starts this replica's gossip.
func (s *Server) startDiscovery(spare bool) error {
	cfg := &s.cfg
	dc := discovery.DefaultConfig()
	dc.BindAddr, dc.Join, dc.Logger = cfg.GossipListen, cfg.Join, cfg.Logger
	dc.Meta = discovery.Meta{Cell: cfg.Cell, ID: cfg.ID, ClientAddr: cfg.Advertise, PeerAddr: s.peerAdvertise, DataID: s.dataID, Spare: spare}
	if cfg.TLS != nil {
		// The gossip admits only replicas of the cell's CA, both ways.
		dc.TLS = &discovery.TLSConfig{Server: cfg.TLS.ServerConfig(tlsconf.RequireCert, false), Client: cfg.TLS.ClientConfig()}
	}
	d, err := discovery.Start(context.Background(), dc)
	if err != nil {
		return err
	}
	s.disc = d
	return nil
}

// bootstrapWait bounds how long a replica waits for BootstrapExpect peers.
const bootstrapWait = 10 * time.Minute

// plan decides how a replica with discovery starts: the configuration of
// a new cell (this replica is one of its voters), or join (wait to be
// added). A replica with state on disk joins: its log says the rest.
func (s *Server) plan(empty bool) (vr.Members, bool, error) {
	self := vr.Member{ID: s.cfg.ID, ClientAddr: s.cfg.Advertise, PeerAddr: s.peerAdvertise}
	switch {
	case !empty || s.cfg.BootstrapExpect == 0:
		return nil, true, nil
	case s.cfg.BootstrapExpect == 1:
		s.decide("bootstrap: a new cell of this replica alone")
		return vr.Members{self}, false, nil
	}
	return s.awaitBootstrap(self)
}

// awaitBootstrap waits until BootstrapExpect replicas of this cell with
// nothing on disk have found each other, and their view has held still
// for a second: the BootstrapExpect with the lowest ids form the cell. A
// replica that sees a member of an existing cell joins it instead.
func (s *Server) awaitBootstrap(self vr.Member) (vr.Members, bool, error) {
	n := s.cfg.BootstrapExpect
	deadline := time.Now().Add(bootstrapWait)
	var last []uint64
	stableSince := time.Now()
	for time.Now().Before(deadline) {
		changed := s.disc.Changed()
		var spares vr.Members
		for _, p := range s.disc.Members() {
			if p.State != discovery.Alive {
				continue
			}
			if !p.Meta.Spare {
				s.decide(fmt.Sprintf("bootstrap: replica %d already serves this cell; joining it", p.Meta.ID))
				return nil, true, nil
			}
			spares = append(spares, vr.Member{ID: p.Meta.ID, ClientAddr: p.Meta.ClientAddr, PeerAddr: p.Meta.PeerAddr})
		}
		slices.SortFunc(spares, func(a, b vr.Member) int { return cmp.Compare(a.ID, b.ID) })
		if ids := spares.IDs(); !slices.Equal(ids, last) {
			last, stableSince = ids, time.Now()
		}
		if len(spares) >= n && time.Since(stableSince) >= time.Second {
			members := spares[:n]
			if err := members.Validate(); err != nil {
				return nil, false, fmt.Errorf("bootstrap: the replicas found do not make a configuration: %w", err)
			}
			if !members.Contains(self.ID) {
				s.decide(fmt.Sprintf("bootstrap: replicas %v form the cell; this one joins it", members.IDs()))
				return nil, true, nil
			}
			s.decide(fmt.Sprintf("bootstrap: a new cell of replicas %v", members.IDs()))
			return members, false, nil
		}
		select {
		case <-changed:
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil, false, errors.New("bootstrap: gave up waiting for the expected replicas")
}

package fs

import (
	"fmt"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/cloudwego/gopkg/protocol/thrift"
)

// EncodeCommand returns the log encoding of c: Thrift binary of
// fsm.Command.
func EncodeCommand(c *fsm.Command) []byte {
	return thrift.FastMarshal(c)
}

// DecodeCommand decodes a command encoded by EncodeCommand. Trailing bytes
// are an error, and so is a command of a newer format version than
// CommandVersion (a *FormatError). Decoding checks the wire format and
// required fields only; Apply validates the content.
func DecodeCommand(b []byte) (*fsm.Command, error) {
	c := fsm.NewCommand()
	if err := fastRead(b, c, commandSchema); err != nil {
		return nil, fmt.Errorf("fs: decode command: %w", err)
	}
	if err := checkCommandVersion(c.Version); err != nil {
		return nil, fmt.Errorf("fs: decode command: %w", err)
	}
	return c, nil
}

// ApplyBytes decodes and applies one encoded command. A decode error changes
// nothing and is returned as err; a refused command is res.Err, as in Apply.
func (s *State) ApplyBytes(b []byte) (*fsm.Result_, Effects, error) {
	c, err := DecodeCommand(b)
	if err != nil {
		return nil, Effects{}, err
	}
	res, fx := s.Apply(c)
	return res, fx, nil
}

// EncodeResult returns the Thrift binary encoding of r.
func EncodeResult(r *fsm.Result_) []byte {
	return thrift.FastMarshal(r)
}

// DecodeResult decodes a result encoded by EncodeResult.
func DecodeResult(b []byte) (*fsm.Result_, error) {
	r := fsm.NewResult_()
	if err := fastRead(b, r, resultSchema); err != nil {
		return nil, fmt.Errorf("fs: decode result: %w", err)
	}
	return r, nil
}

// cloneResult returns a deep copy of r, so that the copy a session keeps for
// exactly-once cannot be changed through the Result handed to the caller.
func cloneResult(r *fsm.Result_) *fsm.Result_ {
	if r == nil {
		return nil
	}
	c := &fsm.Result_{}
	if r.Err != nil {
		e := *r.Err
		e.MasterAddress = clonePtr(r.Err.MasterAddress)
		e.Epoch = clonePtr(r.Err.Epoch)
		c.Err = &e
	}
	c.Session = clonePtr(r.Session)
	if r.Handle != nil {
		h := *r.Handle
		c.Handle = &h
	}
	c.Stat = cloneStat(r.Stat)
	if r.Sequencer != nil {
		sq := *r.Sequencer
		c.Sequencer = &sq
	}
	c.Created = clonePtr(r.Created)
	c.Waiting = clonePtr(r.Waiting)
	c.TimestampsReserved = clonePtr(r.TimestampsReserved)
	if m := r.Multi; m != nil {
		c.Multi = &chubby.MultiResponse{Succeeded: m.Succeeded, FailedCompare: clonePtr(m.FailedCompare),
			Stats: make([]*chubby.Stat, len(m.Stats))}
		for i, st := range m.Stats {
			c.Multi.Stats[i] = cloneStat(st)
		}
	}
	return c
}

func cloneStat(st *chubby.Stat) *chubby.Stat {
	if st == nil {
		return nil
	}
	c := *st
	if st.Lock != nil {
		li := *st.Lock
		li.Mode = clonePtr(st.Lock.Mode)
		c.Lock = &li
	}
	c.Acl = clonePtr(st.Acl)
	return &c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

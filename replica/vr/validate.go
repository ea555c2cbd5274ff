package vr

// validate checks a message from a peer before anything acts on it, and
// returns why it is refused ("" when it is acceptable). It checks what a
// message says on its own (and against the configuration), never the
// node's protocol state: a stale but well-formed message is acceptable and
// the handlers ignore it. Nothing a peer sends can make the node panic.
//
// The checks come in three steps, each only when the one before passed:
// what every message must satisfy, who may send or receive its type, and
// what its type asks of its content.
func (n *Node) validate(m *Message) string {
	if r := n.validHeader(m); r != "" {
		return r
	}
	if n.primaryKnown(m.View) {
		if r := validRole(m, n.primaryOf(m.View)); r != "" {
			return r
		}
	}
	return n.validBody(m)
}

// validHeader checks what every message must satisfy whatever its type:
// a known type, addressed to this replica from another member, numbers in
// range, no view after its own, and bounded entries and runs.
func (n *Node) validHeader(m *Message) string {
	switch {
	case m.Type == 0 || m.Type >= msgTypeEnd:
		return "unknown message type"
	case m.Type == MsgSnapshotChunk || m.Type == MsgSnapshotChunkOK:
		return "a snapshot transfer message, for the driver"
	case m.To != n.id:
		return "addressed to another replica"
	case m.From == n.id:
		return "from this replica"
	case m.View >= maxView:
		return "view out of range"
	case m.Op >= maxIndex || m.Commit >= maxIndex || m.PrevOp >= maxIndex || m.StartOp >= maxIndex:
		return "index out of range"
	case m.PrevView > m.View || m.OpView > m.View || m.LastNormalView > m.View:
		return "names a view after its own"
	case len(m.Entries) > MaxMessageEntries:
		return "too many entries"
	case len(m.Runs) > MaxRuns:
		return "too many runs"
	}
	return ""
}

// validRole checks that m travels from or to the primary of its view
// (primary) as its type requires.
func validRole(m *Message, primary uint64) string {
	switch m.Type {
	case MsgPrepare:
		if m.From != primary {
			return "prepare from a replica that is not the view's primary"
		}
	case MsgLog:
		// (A catch-up answer carries its sender's commit number and goes
		// to a voter that had not entered the epoch, whatever its role:
		// answerCatchUp.)
		if m.To != primary && m.Commit == 0 {
			return "log sent to a replica that is not the view's primary"
		}
	case MsgCommit:
		if m.From != primary {
			return "commit from a replica that is not the view's primary"
		}
	case MsgPrepareOK:
		if m.To != primary {
			return "prepare-ok sent to a replica that is not the view's primary"
		}
	case MsgDoViewChange:
		if m.To != primary {
			return "do-view-change sent to a replica that is not the view's new primary"
		}
	case MsgStartView:
		if m.From != primary {
			return "start-view from a replica that is not the view's primary"
		}
	case MsgGetLog:
		if m.From != primary {
			return "get-log from a replica that is not the view's new primary"
		}
	case MsgSnapshot:
		if m.From != primary && m.To != primary {
			return "snapshot between two backups"
		}
	}
	return ""
}

// validBody checks what m's type asks of its content: entries, log shape,
// indexes and snapshot metadata.
func (n *Node) validBody(m *Message) string {
	switch m.Type {
	case MsgPrepare:
		if len(m.Entries) == 0 {
			return "prepare without entries"
		}
		return n.validEntries(m)
	case MsgLog:
		if len(m.Entries) > 0 {
			if r := n.validEntries(m); r != "" {
				return r
			}
		}
		if m.Op < m.PrevOp+uint64(len(m.Entries)) {
			return "log longer than its sender's"
		}
	case MsgProbe, MsgStartViewChange:
		if m.View == 0 {
			return "view 0 never needs a change"
		}
	case MsgDoViewChange:
		return validDoViewChange(m)
	case MsgStartView:
		return validRuns(m.PrevOp, m.PrevView, m.Runs, false, 0, 0)
	case MsgGetLog:
		if m.Op == 0 {
			return "get-log from index 0"
		}
	case MsgSnapshot:
		return n.validSnapshot(m)
	}
	return ""
}

// validDoViewChange checks a DoViewChange's view and log shape, which
// starts at its commit number.
func validDoViewChange(m *Message) string {
	// (Its log may end with entries of View itself: a replica that was
	// recovering in View and restarted sends DoViewChange again; only a
	// primary already normal in View gets it.)
	if m.View == 0 || m.LastNormalView >= m.View {
		return "do-view-change names a view it cannot have been normal in"
	}
	if m.Commit > m.Op || m.PrevOp != m.Commit {
		return "do-view-change shape does not start at its commit number"
	}
	return validRuns(m.PrevOp, m.PrevView, m.Runs, m.Final, m.Op, m.OpView)
}

// validSnapshot checks a Snapshot's metadata: present, in range, and a
// valid configuration that includes this replica.
func (n *Node) validSnapshot(m *Message) string {
	s := m.Snapshot
	if s == nil {
		return "snapshot without metadata"
	}
	if s.Index == 0 || s.Index >= maxIndex || s.View > m.View || s.Epoch >= maxEpoch || s.Epoch > epochOf(m.View) {
		return "snapshot metadata out of range"
	}
	if err := s.Members.Validate(); err != nil {
		return "snapshot configuration: " + err.Error()
	}
	return ""
}

// validEntries checks that m's entries follow PrevOp contiguously with
// views that never decrease, starting no lower than PrevView and at most
// m.View, and that each is well-formed and within the limits.
func (n *Node) validEntries(m *Message) string {
	prevView := m.PrevView
	size := 0
	for i, e := range m.Entries {
		switch {
		case e.Index != m.PrevOp+1+uint64(i):
			return "entries not contiguous after prev"
		case e.View < prevView || e.View > m.View:
			return "entry views decrease or exceed the message view"
		case !e.Type.valid():
			return "unknown entry type"
		case len(e.Data) > MaxEntryBytes:
			return "entry too large"
		}
		if e.Type == EntryConfig {
			if _, err := DecodeConfig(e.Data); err != nil {
				return "configuration entry: " + err.Error()
			}
		}
		size += len(e.Data)
		if size > MaxMessageBytes {
			return "entries too large"
		}
		prevView = e.View
	}
	return ""
}

// validRuns checks a log shape: after the anchor (a, av), runs with
// increasing ends and views that never decrease. When final and end > 0,
// the runs must end exactly at end with view endView.
func validRuns(a, av uint64, runs []Run, final bool, end, endView uint64) string {
	last, view := a, av
	for _, r := range runs {
		if r.Last <= last || r.View < view || r.Last >= maxIndex {
			return "malformed log shape"
		}
		last, view = r.Last, r.View
	}
	if end > 0 {
		if last > end {
			return "log shape beyond its end"
		}
		if final && (last != end || view != endView) {
			return "final log shape does not end at its end"
		}
	}
	return ""
}

package vr

// ReadsAllowedUntil returns the driver-clock time (ns) until which the
// application may answer reads from its own state, when it may now: the
// end of the master lease, if this node is the normal primary, holds the
// lease, and has committed and applied the log its view started with
// (CanServeReads). A driver publishes it after each Ready so that reader
// goroutines can check a read against their own reading of the same clock
// without going through the node.
func (n *Node) ReadsAllowedUntil() (int64, bool) {
	start, ok := n.leaseStart()
	if !ok || n.commit < n.startOp || n.applied < n.startOp {
		return 0, false
	}
	return start + n.leaseHold, true
}

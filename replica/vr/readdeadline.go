package vr

// ReadsAllowedUntil returns the driver-clock time (ns) until which the
// application may answer reads from its own state, when it may now: the
// end of the master lease, if this node is the normal primary, holds the
// lease, and has committed and applied the log its view started with
// (CanServeReads). A driver publishes it after each Ready so that reader
// goroutines can check a read against their own reading of the same clock
// without going through the node.
func (n *Node) ReadsAllowedUntil() (int64, bool) {
	end, ok := n.leaseEnd()
	if !ok || n.commit < n.startOp || n.applied < n.startOp {
		return 0, false
	}
	return end, true
}

// leaseEnd returns when the primary's lease ends on its clock: the newest
// round a quorum acknowledged plus LeaseDuration·(1−MaxClockDrift), or,
// in the first view of an epoch it carried on into (carryOn), the end of
// the lease the previous epoch's voters granted, whichever is later.
func (n *Node) leaseEnd() (int64, bool) {
	end, ok := int64(0), false
	if start, got := n.leaseStart(); got {
		end, ok = start+n.leaseHold, true
	}
	if n.isPrimary() && n.view == n.carriedView && n.carried > end {
		end, ok = n.carried, true
	}
	return end, ok
}

package master

// Naming is how a replica answers a GetMaster (a client's locate round or
// master watch).
type Naming int

const (
	// NameWait: hold the call and look again when what the replica knows
	// changes, or when the hold is over.
	NameWait Naming = iota
	// NameSelf: this replica is the master, under a master lease held now.
	NameSelf
	// NameOther: the replica this one believes is the primary, with that
	// view's epoch.
	NameOther
	// NameNone: UNAVAILABLE — no master known, or this replica is the
	// master without a master lease.
	NameNone
)

// MasterView is what a replica knows as it answers a GetMaster.
type MasterView struct {
	Serving   bool // it serves as master
	LeaseHeld bool // ... under a master lease held now
	Known     bool // it knows another replica as the primary of its view
	Suspect   bool // ... and that replica is the one the caller suspects
	HoldOver  bool // the call has been held as long as it may be
}

// NameMaster is the rule a GetMaster is answered by, in the cell's handler
// and the simulator alike. A master names itself only under a master lease
// held now: one cut off from the others (or just resumed from a pause)
// must not send clients to itself. Another replica names the primary it
// believes in, but not the caller's suspect (a replica the caller could not
// reach, or a master watch's current master) while the call may still be
// held: naming it would only send the caller back to it. One that knows no
// master holds the call, a view change being the likely cause.
func NameMaster(v MasterView) Naming {
	switch {
	case v.Serving && v.LeaseHeld:
		return NameSelf
	case v.Serving:
		return NameNone
	case v.Known && (!v.Suspect || v.HoldOver):
		return NameOther
	case v.HoldOver:
		return NameNone
	}
	return NameWait
}

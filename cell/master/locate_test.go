package master

import "testing"

func TestNameMaster(t *testing.T) {
	for _, tc := range []struct {
		v    MasterView
		want Naming
	}{
		{MasterView{Serving: true, LeaseHeld: true}, NameSelf},
		{MasterView{Serving: true, LeaseHeld: true, Known: true, HoldOver: true}, NameSelf},
		{MasterView{Serving: true}, NameNone}, // a master without its lease sends nobody to itself
		{MasterView{Serving: true, HoldOver: true}, NameNone},
		{MasterView{Known: true}, NameOther},
		{MasterView{Known: true, Suspect: true}, NameWait}, // a watch: held while the suspect is all it knows
		{MasterView{Known: true, Suspect: true, HoldOver: true}, NameOther},
		{MasterView{}, NameWait}, // a view change: held for a master to appear
		{MasterView{HoldOver: true}, NameNone},
	} {
		if got := NameMaster(tc.v); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.v, got, tc.want)
		}
	}
}

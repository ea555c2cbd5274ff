package master

import "testing"

func TestEpochParts(t *testing.T) {
	for _, tc := range []struct {
		epoch        int64
		config, view uint64
		ok           bool
	}{
		{0, 0, 0, false},
		{-3, 0, 0, false},
		{1, 0, 0, true},                        // view 0
		{5, 0, 4, true},                        // view 4 of the first configuration
		{17179869189, 4, 4, true},              // 4<<32 + 4, + 1
		{Epoch(7<<32 | 123), 7, 123, true},     // round trip
		{Epoch(1<<32 - 1), 0, 1<<32 - 1, true}, // the last view of epoch 0
	} {
		c, v, ok := EpochParts(tc.epoch)
		if c != tc.config || v != tc.view || ok != tc.ok {
			t.Errorf("EpochParts(%d) = %d, %d, %t; want %d, %d, %t", tc.epoch, c, v, ok, tc.config, tc.view, tc.ok)
		}
	}
}

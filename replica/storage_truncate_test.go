package replica

import (
	"fmt"
	"testing"
)

func TestStorageTruncateFrom(t *testing.T) {
	entries := func(lo, hi int, tag string) [][]byte {
		var es [][]byte
		for i := lo; i <= hi; i++ {
			es = append(es, []byte(fmt.Sprintf("%s%d", tag, i)))
		}
		return es
	}
	tests := []struct {
		name      string
		snapshot  uint64 // 0: none
		from      uint64
		wantErr   bool
		wantFirst uint64
		wantLast  uint64
	}{
		{name: "middle", from: 6, wantFirst: 1, wantLast: 5},
		{name: "all", from: 1, wantFirst: 1, wantLast: 0},
		{name: "past the end", from: 11, wantFirst: 1, wantLast: 10},
		{name: "after a snapshot", snapshot: 4, from: 5, wantFirst: 5, wantLast: 4},
		{name: "inside the snapshot", snapshot: 4, from: 4, wantErr: true, wantFirst: 5, wantLast: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st, err := OpenStorage(dir, StorageOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Append(entries(1, 10, "a")); err != nil {
				t.Fatal(err)
			}
			if tc.snapshot > 0 {
				if err := st.SaveSnapshot(tc.snapshot, []byte("snap")); err != nil {
					t.Fatal(err)
				}
			}
			err = st.TruncateFrom(tc.from)
			if (err != nil) != tc.wantErr {
				t.Fatalf("TruncateFrom(%d) = %v, want error %v", tc.from, err, tc.wantErr)
			}
			check := func(st *Storage) {
				t.Helper()
				if first, last := st.Bounds(); first != tc.wantFirst || last != tc.wantLast {
					t.Fatalf("bounds [%d,%d], want [%d,%d]", first, last, tc.wantFirst, tc.wantLast)
				}
			}
			check(st)
			// The next append continues right after the cut, and all of it
			// survives a reopen.
			if err := st.Append(entries(int(tc.wantLast)+1, int(tc.wantLast)+2, "b")); err != nil {
				t.Fatal(err)
			}
			tc.wantLast += 2
			st.Close()
			st, err = OpenStorage(dir, StorageOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			check(st)
			got, err := st.Entries(tc.wantLast, tc.wantLast)
			if err != nil || string(got[0]) != fmt.Sprintf("b%d", tc.wantLast) {
				t.Fatalf("last entry %q, %v", got, err)
			}
		})
	}
}

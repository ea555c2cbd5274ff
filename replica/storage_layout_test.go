package replica

import (
	"errors"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

// TestStorageLayoutVersion: a new directory records LayoutVersion; a
// directory of a newer layout is refused, naming both versions, and left
// as it was; one without the record (from before versions) opens.
func TestStorageLayoutVersion(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := st.GetMeta(metaLayout); err != nil || string(b) != "1" {
		t.Fatalf("layout record %q, %v; want \"1\"", b, err)
	}
	if err := st.Append([][]byte{[]byte("e1")}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetMeta(metaLayout, []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = OpenStorage(dir, StorageOptions{})
	var le *LayoutError
	if !errors.As(err, &le) || le.Found != 2 || le.Newest != LayoutVersion {
		t.Fatalf("newer layout: %v, want a LayoutError", err)
	}
	for _, want := range []string{"version 2", "version 1", "newer", dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("newer layout: %q does not say %q", err, want)
		}
	}

	// Back to no record at all: a directory from before versions.
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(metaKey(metaLayout))
		if err != nil {
			return err
		}
		if v, _ := item.ValueCopy(nil); string(v) != "2" {
			t.Errorf("the refused open changed the record to %q", v)
		}
		return txn.Delete(metaKey(metaLayout))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	st, err = OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatalf("a directory without a layout record: %v", err)
	}
	defer st.Close()
	if b, _ := st.GetMeta(metaLayout); string(b) != "1" {
		t.Fatalf("layout record %q after opening an unversioned directory", b)
	}
	if first, last := st.Bounds(); first != 1 || last != 1 {
		t.Fatalf("log %d..%d, want the entry written before", first, last)
	}
}

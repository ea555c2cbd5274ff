package txn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Kind says what a lock or a write record stands for.
type Kind uint8

const (
	// KindPut: the column holds a value from this transaction.
	KindPut Kind = 1
	// KindDelete: the transaction deleted the column's value.
	KindDelete Kind = 2
	// KindRollback (write records only): the transaction was rolled back
	// here; a reader skips it, and its own commit would find it.
	KindRollback Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindPut:
		return "put"
	case KindDelete:
		return "delete"
	case KindRollback:
		return "rollback"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Lock is Percolator's lock column of one cell: the transaction that
// started at Start has prewritten this column and not yet committed it.
// Every lock names the transaction's primary column, whose row decides
// the outcome, and the worker whose liveness says whether anybody may
// still commit it.
type Lock struct {
	Start      int64
	PrimaryRow string
	PrimaryCol string
	Worker     string
	Kind       Kind // KindPut or KindDelete: what the commit will record
}

// Data is one version of the data column: the value the transaction that
// started at Start wrote.
type Data struct {
	Start int64
	Value []byte
}

// Write is one record of the write column: the transaction that started at
// Start committed at Commit (or, for KindRollback, was rolled back; Commit
// is then Start). It points at the data, it does not hold it.
type Write struct {
	Commit int64
	Start  int64
	Kind   Kind
}

// Column is one column of a row: Percolator's lock, data and write columns
// for it. Data is sorted by Start and Writes by Commit, both strictly.
type Column struct {
	Lock   *Lock
	Data   []Data
	Writes []Write
}

// Row is one row: its columns by name. Floor is the safe point of the
// last garbage collection that removed versions from the row (0 if none
// did): snapshots below it may miss what was removed. The table's meta
// row (key "") has no columns; its Floor is the table's, the highest safe
// point any collection used, which is what a row that is gone is judged
// by.
type Row struct {
	Floor int64
	Cols  map[string]*Column
}

// col returns the column name, creating it if missing.
func (r *Row) col(name string) *Column {
	if r.Cols == nil {
		r.Cols = map[string]*Column{}
	}
	c := r.Cols[name]
	if c == nil {
		c = &Column{}
		r.Cols[name] = c
	}
	return c
}

// empty reports whether the column holds nothing: it can be dropped.
func (c *Column) empty() bool { return c.Lock == nil && len(c.Data) == 0 && len(c.Writes) == 0 }

// visible returns the write a snapshot at ts sees: the latest commit or
// delete record with Commit <= ts (rollback records are skipped).
func (c *Column) visible(ts int64) (Write, bool) {
	i := sort.Search(len(c.Writes), func(i int) bool { return c.Writes[i].Commit > ts })
	for i--; i >= 0; i-- {
		if c.Writes[i].Kind != KindRollback {
			return c.Writes[i], true
		}
	}
	return Write{}, false
}

// writeOf returns the record of the transaction that started at start.
func (c *Column) writeOf(start int64) (Write, bool) {
	for i := len(c.Writes) - 1; i >= 0; i-- {
		if c.Writes[i].Start == start {
			return c.Writes[i], true
		}
	}
	return Write{}, false
}

// conflict returns a record that forbids a transaction that started at
// start to write the column: a commit after its start (first committer
// wins), or its own rollback.
func (c *Column) conflict(start int64) (Write, bool) {
	for i := len(c.Writes) - 1; i >= 0; i-- {
		w := c.Writes[i]
		if w.Commit < start {
			break
		}
		if w.Kind != KindRollback || w.Start == start {
			return w, true
		}
	}
	return Write{}, false
}

// data returns the value written by the transaction that started at start.
func (c *Column) data(start int64) ([]byte, bool) {
	i, ok := slices.BinarySearchFunc(c.Data, start, func(d Data, s int64) int { return cmpInt(d.Start, s) })
	if !ok {
		return nil, false
	}
	return c.Data[i].Value, true
}

// putData adds (or replaces) the version written at start.
func (c *Column) putData(start int64, v []byte) {
	i, ok := slices.BinarySearchFunc(c.Data, start, func(d Data, s int64) int { return cmpInt(d.Start, s) })
	if ok {
		c.Data[i].Value = v
		return
	}
	c.Data = slices.Insert(c.Data, i, Data{Start: start, Value: v})
}

// dropData removes the version written at start, if any.
func (c *Column) dropData(start int64) {
	c.Data = slices.DeleteFunc(c.Data, func(d Data) bool { return d.Start == start })
}

// addWrite inserts w in commit order (a record for the same commit
// timestamp is replaced: applying a decision twice is harmless).
func (c *Column) addWrite(w Write) {
	i, ok := slices.BinarySearchFunc(c.Writes, w.Commit, func(x Write, t int64) int { return cmpInt(x.Commit, t) })
	if ok {
		c.Writes[i] = w
		return
	}
	c.Writes = slices.Insert(c.Writes, i, w)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// The encoding of a row, in one file of the cell. All integers are
// unsigned varints, strings and values are a varint length and the bytes:
//
//	row    = magic floor ncols column*        (columns sorted by name)
//	column = name lock? ndata data* nwrites write*
//	lock   = 0 | 1 start primaryRow primaryCol worker kind
//	data   = start value                      (sorted by start)
//	write  = commit start kind                (sorted by commit)
const rowMagic = "ptx1"

// ErrCorrupt is returned for a row whose bytes are not a row this package
// wrote: the transaction gives up rather than guess.
var ErrCorrupt = errors.New("txn: corrupt row")

// encodeRow returns r's bytes.
func encodeRow(r *Row) []byte {
	b := append([]byte(nil), rowMagic...)
	b = binary.AppendUvarint(b, uint64(r.Floor))
	names := make([]string, 0, len(r.Cols))
	for n, c := range r.Cols {
		if !c.empty() {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = encodeColumn(b, n, r.Cols[n])
	}
	return b
}

func encodeColumn(b []byte, name string, c *Column) []byte {
	b = appendString(b, name)
	if l := c.Lock; l == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(l.Start))
		b = appendString(b, l.PrimaryRow)
		b = appendString(b, l.PrimaryCol)
		b = appendString(b, l.Worker)
		b = append(b, byte(l.Kind))
	}
	b = binary.AppendUvarint(b, uint64(len(c.Data)))
	for _, d := range c.Data {
		b = binary.AppendUvarint(b, uint64(d.Start))
		b = appendString(b, string(d.Value))
	}
	b = binary.AppendUvarint(b, uint64(len(c.Writes)))
	for _, w := range c.Writes {
		b = binary.AppendUvarint(b, uint64(w.Commit))
		b = binary.AppendUvarint(b, uint64(w.Start))
		b = append(b, byte(w.Kind))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeRow parses b (empty: the empty row) and checks everything a row
// must be: known kinds, timestamps in range, sorted versions, a value for
// every committed put.
func decodeRow(b []byte) (*Row, error) {
	r := &Row{}
	if len(b) == 0 {
		return r, nil
	}
	d := decoder{b: b}
	if string(d.bytes(len(rowMagic))) != rowMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	r.Floor = d.ts(true)
	n := d.count()
	prev := ""
	for i := 0; i < n && d.err == nil; i++ {
		name := d.name(MaxColumnBytes)
		if i > 0 && name <= prev {
			d.fail("columns out of order")
		}
		prev = name
		c := d.column()
		if d.err == nil {
			r.col(name)
			r.Cols[name] = c
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, why)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// ts reads a timestamp: 1..MaxTimestamp (0 too if zeroOK).
func (d *decoder) ts(zeroOK bool) int64 {
	v := d.uvarint()
	if v > maxTimestamp || v == 0 && !zeroOK {
		d.fail("timestamp out of range")
		return 0
	}
	return int64(v)
}

// count reads a length that cannot exceed the bytes left.
func (d *decoder) count() int {
	v := d.uvarint()
	if v > uint64(len(d.b)) {
		d.fail("count larger than the row")
		return 0
	}
	return int(v)
}

func (d *decoder) bytes(n int) []byte {
	if n > len(d.b) {
		d.fail("truncated")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string { return string(d.bytes(d.count())) }

// name reads a key, column or worker name: 1..max bytes.
func (d *decoder) name(max int) string {
	s := d.str()
	if d.err == nil && (s == "" || len(s) > max) {
		d.fail("name of a bad length")
	}
	return s
}

func (d *decoder) kind(ok ...Kind) Kind {
	b := d.bytes(1)
	if len(b) == 0 {
		return 0
	}
	if k := Kind(b[0]); slices.Contains(ok, k) {
		return k
	}
	d.fail("unknown kind")
	return 0
}

func (d *decoder) column() *Column {
	c := &Column{}
	switch has := d.bytes(1); {
	case d.err != nil:
		return nil
	case has[0] == 1:
		c.Lock = &Lock{Start: d.ts(false), PrimaryRow: d.name(MaxKeyBytes), PrimaryCol: d.name(MaxColumnBytes),
			Worker: d.name(MaxKeyBytes), Kind: d.kind(KindPut, KindDelete)}
	case has[0] != 0:
		d.fail("bad lock flag")
	}
	nd := d.count()
	for i := 0; i < nd && d.err == nil; i++ {
		v := Data{Start: d.ts(false), Value: []byte(d.str())}
		if i > 0 && v.Start <= c.Data[i-1].Start {
			d.fail("data out of order")
		}
		c.Data = append(c.Data, v)
	}
	nw := d.count()
	for i := 0; i < nw && d.err == nil; i++ {
		w := Write{Commit: d.ts(false), Start: d.ts(false), Kind: d.kind(KindPut, KindDelete, KindRollback)}
		switch {
		case i > 0 && w.Commit <= c.Writes[i-1].Commit:
			d.fail("writes out of order")
		case w.Kind == KindRollback && w.Commit != w.Start, w.Kind != KindRollback && w.Commit <= w.Start:
			d.fail("write record with a bad commit timestamp")
		}
		c.Writes = append(c.Writes, w)
	}
	if d.err != nil {
		return nil
	}
	for _, w := range c.Writes {
		if _, ok := c.data(w.Start); w.Kind == KindPut && !ok {
			d.fail("committed put without its data")
			return nil
		}
	}
	if c.empty() {
		d.fail("empty column")
		return nil
	}
	return c
}

package vec

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/seed04fbb902/weir/schema"
)

// Projection lists the columns (indexes into the table's columns) that a decode
// produces, in output order.
type Projection []int

// BackfillState is the state of one vnode of a backfill.
type BackfillState uint8

// The vnode states of a backfill.
const (
	NotStarted BackfillState = iota
	InProgress
	Completed
)

func (s BackfillState) String() string {
	switch s {
	case NotStarted:
		return "NotStarted"
	case InProgress:
		return "InProgress"
	case Completed:
		return "Completed"
	}
	return fmt.Sprintf("BackfillState(%d)", uint8(s))
}

// Positions is the per-vnode state of a backfill, indexed by vnode (len = the upstream
// table's vnode count). Pos[v] is the memcomparable pk of the last snapshot row of v
// that was emitted (InProgress; also Completed, where it may be nil for an empty vnode).
type Positions struct {
	State []BackfillState
	Pos   [][]byte
}

// NewPositions returns positions for count vnodes, all NotStarted.
func NewPositions(count int) *Positions {
	return &Positions{State: make([]BackfillState, count), Pos: make([][]byte, count)}
}

// Marker marks the rows of upstream chunks against fixed backfill positions. It is
// built once per change of positions and used for many chunks; it is not safe for
// concurrent use.
type Marker interface {
	// Mark clears out and sets bit i for every visible row i that the backfill must
	// forward: its vnode is Completed, or InProgress with pk <= the vnode's position.
	// vnodes holds each row's vnode (from Kernels.Vnodes); out has at least
	// ceil(rows/8) bytes.
	Mark(c *Chunk, vnodes []uint16, out []byte)
}

// Kernels are the typed operations on one table's rows. A generated package registers
// one implementation per table; Generic serves tables known only at run time. Every
// method is safe for concurrent use. DecodeKeys takes the concrete Arrow builders of
// the columns' Arrow types (e.g. *array.Int64Builder for int64); DecodeValues takes
// NewBuilder's builders (the same, except a *VarBuilder for utf8 and binary).
type Kernels interface {
	// Table is the table the kernels serve.
	Table() *schema.Table
	// Generated reports whether these are generated (typed) kernels.
	Generated() bool
	// EncodeKeys appends the memcomparable pk of every row of c (visible or not) to out.
	EncodeKeys(c *Chunk, out *Bytes)
	// DecodeKeys decodes each key in keys into the pk columns, one builder per pk
	// column in pk order. A key that does not decode is an error naming the table.
	DecodeKeys(keys *Bytes, out []array.Builder) error
	// EncodeValues appends the row value of every row of c (visible or not) to out.
	EncodeValues(c *Chunk, out *Bytes)
	// DecodeValues decodes the projected columns of each value in vals, one builder per
	// projected column (see NewBuilder). Columns outside the projection are not read. A
	// value that does not decode is an error naming the table; builders may then hold
	// partial rows.
	DecodeValues(vals *Bytes, proj Projection, out []Builder) error
	// Vnodes writes the vnode of every row of c into out (len >= rows).
	Vnodes(c *Chunk, out []uint16)
	// NewMarker decodes the positions once, for marking many chunks. A position that
	// does not decode is an error naming the table and vnode.
	NewMarker(p *Positions) (Marker, error)
	// Split assigns every visible row of c to the output mapping[vnode(row)] and
	// fills outs (len = number of outputs; see SplitByDest). vnodes is scratch of len
	// >= rows and holds the rows' vnodes afterwards.
	Split(c *Chunk, mapping []uint16, vnodes []uint16, outs []SplitOutput)
}

// RowDecoder decodes row values one at a time into the builders of a projection: the
// fused path of a reader that holds each value only until it reads the next (a
// storage iterator's), so that the value is decoded while it is in the cache instead
// of being copied into an arena and decoded from there (DecodeValues). Generated
// kernels offer one (RowDecoders); NewRowDecoder gives every kernels one. It is not
// safe for concurrent use.
//
// A batch is Begin, Append for each row, then Flush before the builders' NewArray.
// After an error the batch is abandoned: rows appended before it may still be pending
// (in the decoder or in the builders), so the decoder and its builders are then
// released, not used for another batch.
type RowDecoder interface {
	// Begin prepares for a batch of up to n rows: it reserves room for them (at most
	// MaxBatchRows), and for var-width values as many bytes per value as the last
	// flushed batch had (see BatchBytes).
	Begin(n int)
	// Append decodes one row value. A malformed value is an error naming the table,
	// and nothing of it is decoded (a BatchDecoder finds it at Flush instead).
	Append(v []byte) error
	// Flush completes the rows appended since the last Flush in the builders (fixed-
	// width columns are held and appended in bulk): call it before their NewArray.
	Flush() error
}

// NewRowDecoder returns a decoder of the projected columns of k's table into out, one
// builder per projected column (see NewBuilder): k's own (RowDecoders) when it has
// one and proj names no column twice, a BatchDecoder otherwise.
func NewRowDecoder(k Kernels, proj Projection, out []Builder) (RowDecoder, error) {
	if rk, ok := k.(RowDecoders); ok && !repeats(proj) {
		return rk.NewRowDecoder(proj, out)
	}
	if len(out) < len(proj) {
		return nil, fmt.Errorf("table %s: NewRowDecoder needs %d builders, got %d", k.Table().Name, len(proj), len(out))
	}
	return &BatchDecoder{k: k, proj: proj, out: out}, nil
}

// repeats reports whether proj names a column twice.
func repeats(proj Projection) bool {
	for i, c := range proj {
		if slices.Contains(proj[:i], c) {
			return true
		}
	}
	return false
}

// BatchDecoder is the RowDecoder of kernels without their own, and of projections
// that name a column twice: Append copies each value into an arena, and Flush decodes
// them all at once with DecodeValues (which reports a malformed value, by its index
// in the batch).
type BatchDecoder struct {
	k    Kernels
	proj Projection
	out  []Builder
	vals Bytes
}

// Begin implements RowDecoder.
func (d *BatchDecoder) Begin(int) { d.vals.Reset() }

// Append implements RowDecoder: it copies v.
func (d *BatchDecoder) Append(v []byte) error {
	d.vals.Append(v)
	return nil
}

// Flush implements RowDecoder: it decodes the copied values.
func (d *BatchDecoder) Flush() error {
	n := d.vals.Len()
	for _, b := range d.out[:len(d.proj)] {
		b.Reserve(n)
	}
	err := d.k.DecodeValues(&d.vals, d.proj, d.out)
	d.vals.Reset()
	return err
}

// RowDecoders is implemented by kernels that decode row values one at a time (every
// generated Kernels does; Generic does not, and a reader then decodes a batch at a
// time with DecodeValues).
type RowDecoders interface {
	// NewRowDecoder returns a decoder of the projected columns into out, one builder
	// per projected column (see NewBuilder). It is an error when the builders do not
	// fit the columns, or when the projection names a column twice.
	NewRowDecoder(proj Projection, out []Builder) (RowDecoder, error)
}

var registry = struct {
	sync.RWMutex
	m map[string]Kernels
}{m: map[string]Kernels{}}

// Register makes generated kernels available for every table with their table's
// fingerprint. Generated packages call it from init. Registering a second
// implementation for a fingerprint panics (two generated packages for one schema shape
// must agree, and init order would otherwise pick one at random).
func Register(k Kernels) {
	fp := k.Table().Fingerprint()
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.m[fp]; dup {
		panic(fmt.Sprintf("vec: kernels for table %s (fingerprint %s) registered twice", k.Table().Name, fp))
	}
	registry.m[fp] = k
}

// Registered lists the names and fingerprints of the registered tables, sorted.
func Registered() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, 0, len(registry.m))
	for fp, k := range registry.m {
		out = append(out, k.Table().Name+" "+fp)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the generated kernels registered for a table of this shape, or false.
func Lookup(t *schema.Table) (Kernels, bool) {
	registry.RLock()
	defer registry.RUnlock()
	k, ok := registry.m[t.Fingerprint()]
	return k, ok
}

// For returns the generated kernels of the table's shape when registered, and the
// generic kernels otherwise.
func For(t *schema.Table) Kernels {
	if k, ok := Lookup(t); ok {
		return k
	}
	return NewGeneric(t)
}

// CheckChunk reports whether c has table t's shape: the same number of columns, each
// of the column's Arrow type, and no NULL in a NOT NULL column. The error names the
// table and the column.
func CheckChunk(t *schema.Table, c *Chunk) error {
	rec := c.Record()
	if n := int(rec.NumCols()); n < len(t.Columns) {
		return fmt.Errorf("table %s: column %s: missing (the chunk has %d columns, the table %d)", t.Name, t.Columns[n].Name, n, len(t.Columns))
	} else if n > len(t.Columns) {
		return fmt.Errorf("table %s: column %q: not in the table (the chunk has %d columns, the table %d)", t.Name, rec.ColumnName(len(t.Columns)), n, len(t.Columns))
	}
	for i, col := range t.Columns {
		arr := rec.Column(i)
		if want := col.Type.ArrowType(); !arrow.TypeEqual(arr.DataType(), want) {
			return fmt.Errorf("table %s: column %s: chunk has type %s, want %s", t.Name, col.Name, arr.DataType(), want)
		}
		if !col.Nullable && arr.NullN() > 0 {
			return fmt.Errorf("table %s: column %s: %d NULLs in a NOT NULL column", t.Name, col.Name, arr.NullN())
		}
	}
	return nil
}

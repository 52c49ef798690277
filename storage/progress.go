package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// ErrCorruptProgress is wrapped by every error about a stored progress row that does not
// decode. Such an error reads "corrupt backfill state: table T vnode V: reason", where T
// is the progress table's name and V the vnode named by the row's key ("unknown" when
// the key is too short to name one).
var ErrCorruptProgress = errors.New("corrupt backfill state")

// Column names of a progress row besides the position columns, which are the upstream
// pk columns' names with ProgressPosPrefix in front.
const (
	ProgressVnodeColumn    = "vnode"
	ProgressPosPrefix      = "pos_"
	ProgressFinishedColumn = "backfill_finished"
	ProgressRowsColumn     = "row_count"
)

// VnodeProgress is the backfill progress of one upstream vnode.
//
//   - NotStarted: Pos nil, Rows 0. It has no row; it cannot be written after progress.
//   - InProgress: Pos is the memcomparable upstream pk of the last snapshot row emitted
//     (never nil); Rows counts the snapshot rows emitted.
//   - Completed: the vnode's snapshot is done. Rows > 0: Pos is the last row's pk. Rows
//     == 0: the vnode was empty and Pos is nil (the row stores NULL in every position
//     column). So a Completed vnode has a position exactly when it has rows.
type VnodeProgress struct {
	State vec.BackfillState
	Pos   []byte
	Rows  int64
}

// Equal reports whether both describe the same progress (a nil and an empty Pos are the
// same: neither is a position).
func (p VnodeProgress) Equal(o VnodeProgress) bool {
	return p.State == o.State && p.Rows == o.Rows && bytes.Equal(p.Pos, o.Pos)
}

func (p VnodeProgress) String() string {
	if p.State == vec.NotStarted && p.Pos == nil && p.Rows == 0 {
		return "NotStarted"
	}
	return fmt.Sprintf("%s{pos %x, rows %d}", p.State, p.Pos, p.Rows)
}

// ProgressTable persists an arrangement backfill's per-vnode progress: one row per
// upstream vnode that has made progress,
//
//	vnode int32 NOT NULL | pos_<pk column>... (nullable) | backfill_finished boolean NOT NULL | row_count int64 NOT NULL
//
// with pk (vnode). The row of upstream vnode v is stored in the progress table's own
// vnode v, under AppendKey(id, v, memcomparable(v)), so it lives in the same vnode as
// the upstream rows it describes and moves with their ownership on a rescale. The
// position is stored decoded into the position columns (one per upstream pk column, of
// the same type), so a batch scan of the table shows it; Load re-encodes it with the
// upstream's key order and returns the exact bytes that were written.
//
// Writes go to a private memtable until Seal publishes them on the node, and the next
// checkpoint commits them, like a StateTable's. Set writes a vnode's row only when the
// progress differs from the last one loaded or written, and refuses progress that moves
// backwards. A ProgressTable is used by one actor goroutine at a time.
type ProgressTable struct {
	node   *Node
	id     uint32
	c      *progressCodec
	vnodes *vnode.Bitmap
	mt     *memtable

	loaded bool
	last   []VnodeProgress // per upstream vnode: the row loaded or written last
	keybuf []byte
	valbuf []byte
}

// NewProgressTable returns the progress table id, named name (the MV's progress table:
// errors name it), of a backfill over upstream, for an actor on node owning vnodes of
// the upstream. Call Load before Set.
func NewProgressTable(node *Node, id uint32, name string, upstream *schema.Table, vnodes *vnode.Bitmap) (*ProgressTable, error) {
	if id == MetaTable {
		return nil, fmt.Errorf("storage: progress table %s: table id %d is reserved for metadata", name, MetaTable)
	}
	c, err := newProgressCodec(name, upstream)
	if err != nil {
		return nil, err
	}
	if vnodes.Count() != upstream.VnodeCount {
		return nil, fmt.Errorf("storage: progress table %s: upstream %s has %d vnodes, the bitmap %d", name, upstream.Name, upstream.VnodeCount, vnodes.Count())
	}
	return &ProgressTable{node: node, id: id, c: c, vnodes: vnodes, mt: newMemtable(), last: make([]VnodeProgress, upstream.VnodeCount)}, nil
}

// Schema is the progress table's schema, derived from the upstream's: what a batch scan
// of the table returns.
func (p *ProgressTable) Schema() *schema.Table { return p.c.t }

// Vnodes is the bitmap of upstream vnodes the actor owns.
func (p *ProgressTable) Vnodes() *vnode.Bitmap { return p.vnodes }

// Load reads the progress of the owned vnodes through the view and the table's own
// unsealed writes: positions over every upstream vnode (vnodes not owned, and owned
// vnodes without a row, are NotStarted) and the rows per vnode. The positions are fresh
// copies; Set compares against what Load returned. A row of an owned vnode that does not
// decode, or a key of the table that names no vnode or one out of range, is an error
// wrapping ErrCorruptProgress; nothing is loaded then, and Set refuses to write until a
// Load succeeds. Rows of vnodes the actor does not own are not decoded.
func (p *ProgressTable) Load(view *View) (*vec.Positions, []int64, error) {
	p.loaded = false
	count := p.c.up.VnodeCount
	pos := vec.NewPositions(count)
	rows := make([]int64, count)
	var extra []*run
	if !p.mt.empty() {
		extra = []*run{{table: p.id, entries: p.mt.sortedAll()}}
	}
	it, err := scanTable(view, p.id, extra)
	if err != nil {
		return nil, nil, fmt.Errorf("storage: load progress table %s: %w", p.c.name, err)
	}
	for it.Next() {
		key := it.Key()
		if len(key) >= KeyPrefixLen {
			if v := binary.BigEndian.Uint16(key[4:]); int(v) < count && !p.vnodes.Contains(v) {
				continue // another actor's vnode
			}
		}
		v, vp, err := p.c.decode(key, it.Value())
		if err != nil {
			it.Close()
			return nil, nil, err
		}
		pos.State[v], pos.Pos[v], rows[v] = vp.State, vp.Pos, vp.Rows
	}
	if err := it.Close(); err != nil {
		return nil, nil, fmt.Errorf("storage: load progress table %s: %w", p.c.name, err)
	}
	for v := range p.last {
		p.last[v] = VnodeProgress{}
		if pos.State[v] != vec.NotStarted {
			p.last[v] = VnodeProgress{State: pos.State[v], Pos: bytes.Clone(pos.Pos[v]), Rows: rows[v]}
		}
	}
	p.loaded = true
	return pos, rows, nil
}

// Set records vnode v's progress. It writes the row only when vp differs from the last
// progress loaded or written for v. It is an error naming the table and vnode, and
// nothing is written, when Load has not been called, v is not owned, vp is not a
// well-formed progress (see VnodeProgress; the position must decode as exactly one
// upstream pk), or vp moves backwards: to NotStarted after progress, to a lower
// position or row count, or away from Completed (a Completed row never changes).
func (p *ProgressTable) Set(v uint16, vp VnodeProgress) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("storage: progress table %s vnode %d: %s", p.c.name, v, fmt.Sprintf(format, args...))
	}
	if !p.loaded {
		return fail("Set before Load")
	}
	if !p.vnodes.Contains(v) {
		return fail("vnode not owned by this actor (it owns %d of %d vnodes)", p.vnodes.Len(), p.vnodes.Count())
	}
	prev := p.last[v]
	if vp.Equal(prev) {
		return nil
	}
	if vp.State == vec.NotStarted {
		if prev.State == vec.NotStarted {
			return fail("NotStarted has no position and no rows (got %s)", vp)
		}
		return fail("cannot go back to NotStarted from %s", prev)
	}
	var err error
	p.valbuf, err = p.c.appendValue(p.valbuf[:0], v, vp)
	if err != nil {
		return fail("%v", err)
	}
	switch {
	case prev.State == vec.Completed:
		return fail("a Completed vnode never changes (from %s to %s)", prev, vp)
	case prev.State == vec.NotStarted:
	case bytes.Compare(vp.Pos, prev.Pos) < 0:
		return fail("position moves backwards (from %x to %x)", prev.Pos, vp.Pos)
	case vp.Rows < prev.Rows:
		return fail("row count decreases (from %d to %d)", prev.Rows, vp.Rows)
	}
	p.keybuf = p.c.appendKey(p.keybuf[:0], p.id, v)
	// Never write what Load would reject or read differently.
	if _, back, err := p.c.decode(p.keybuf, p.valbuf); err != nil || !back.Equal(vp) {
		return fail("progress %s does not round-trip (%v, read back as %s)", vp, err, back)
	}
	p.mt.put(p.keybuf, p.valbuf, false)
	p.last[v] = VnodeProgress{State: vp.State, Pos: bytes.Clone(vp.Pos), Rows: vp.Rows}
	return nil
}

// Changed is the number of vnode rows written since the last Seal (a vnode written
// several times counts once).
func (p *ProgressTable) Changed() int { return p.mt.len() }

// Seal publishes the rows written since the last Seal on the node as epoch, where every
// reader on the node sees them and the next checkpoint at or above epoch commits them.
// A seal at or below a committed or committing epoch is refused and keeps the writes.
func (p *ProgressTable) Seal(epoch uint64) error {
	if p.mt.empty() {
		return nil
	}
	r := p.mt.seal(p.id, epoch)
	r.owned = p.vnodes
	if err := p.node.addRun(r); err != nil {
		p.mt.unseal(r)
		return err
	}
	return nil
}

// DecodeProgressRow decodes one stored row of the progress table named name of a
// backfill over upstream: the full storage key (its table id is not checked) and the
// value. A row that does not decode is an error wrapping ErrCorruptProgress, naming the
// table and the key's vnode; it never panics. Rows are canonical: a row that decodes is
// exactly the row that Set writes for its progress.
func DecodeProgressRow(name string, upstream *schema.Table, key, value []byte) (v uint16, vp VnodeProgress, err error) {
	c, err := newProgressCodec(name, upstream)
	if err != nil {
		return 0, VnodeProgress{}, err
	}
	return c.decode(key, value)
}

// progressCodec converts between VnodeProgress and the rows of one progress table.
type progressCodec struct {
	name     string
	up       *schema.Table
	t        *schema.Table // the derived schema
	layout   *vec.Layout
	pos      []posColumn // one per upstream pk column, in pk order
	finished int         // column indexes
	rows     int
	// anyNotNull: some upstream pk column is NOT NULL, so a NULL in every position
	// column can only mean "no position".
	anyNotNull bool
	w          *vec.ValueWriter
	scratch    []byte
}

// posColumn is one position column: an upstream pk column stored in the progress row.
type posColumn struct {
	col              int // index in the derived schema
	name             string
	typ              schema.Type
	desc, nullsFirst bool
	notNull          bool // the upstream column is NOT NULL
}

func newProgressCodec(name string, up *schema.Table) (*progressCodec, error) {
	if up == nil || len(up.PK) == 0 {
		return nil, fmt.Errorf("storage: progress table %s: the upstream has no primary key", name)
	}
	if err := vnode.CheckCount(up.VnodeCount); err != nil {
		return nil, fmt.Errorf("storage: progress table %s: upstream %s: %w", name, up.Name, err)
	}
	t := &schema.Table{Name: name, VnodeCount: up.VnodeCount}
	t.Columns = append(t.Columns, schema.Column{Name: ProgressVnodeColumn, Type: schema.Type{Kind: schema.Int32}})
	c := &progressCodec{name: name, up: up, t: t}
	for _, k := range up.PK {
		if k.Column < 0 || k.Column >= len(up.Columns) {
			return nil, fmt.Errorf("storage: progress table %s: upstream %s: pk column index %d out of range", name, up.Name, k.Column)
		}
		uc := up.Columns[k.Column]
		pc := posColumn{col: len(t.Columns), name: ProgressPosPrefix + uc.Name, typ: uc.Type, desc: k.Desc, nullsFirst: k.NullsFirst, notNull: !uc.Nullable}
		c.pos = append(c.pos, pc)
		c.anyNotNull = c.anyNotNull || pc.notNull
		t.Columns = append(t.Columns, schema.Column{Name: pc.name, Type: uc.Type, Nullable: true})
	}
	c.finished = len(t.Columns)
	t.Columns = append(t.Columns, schema.Column{Name: ProgressFinishedColumn, Type: schema.Type{Kind: schema.Boolean}})
	c.rows = len(t.Columns)
	t.Columns = append(t.Columns, schema.Column{Name: ProgressRowsColumn, Type: schema.Type{Kind: schema.Int64}})
	t.PK = []schema.KeyColumn{{Column: 0}}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("storage: progress table %s of upstream %s: %w", name, up.Name, err)
	}
	c.layout = vec.NewLayout(t)
	c.w = vec.NewValueWriter(c.layout)
	return c, nil
}

// vnodePKLen is the length of a progress row's pk: the vnode as a memcomparable int32.
const vnodePKLen = 5

func (c *progressCodec) appendKey(dst []byte, table uint32, v uint16) []byte {
	return vec.AppendKeyInt32(AppendKey(dst, table, v, nil), int32(v), false)
}

func (c *progressCodec) corrupt(v int, format string, args ...any) error {
	vs := "unknown"
	if v >= 0 {
		vs = strconv.Itoa(v)
	}
	return fmt.Errorf("%w: table %s vnode %s: %s", ErrCorruptProgress, c.name, vs, fmt.Sprintf(format, args...))
}

// appendValue appends the row value of vnode v's progress, checking that the progress
// is well formed and its position decodes as one upstream pk.
func (c *progressCodec) appendValue(dst []byte, v uint16, vp VnodeProgress) ([]byte, error) {
	switch vp.State {
	case vec.NotStarted:
		return nil, errors.New("NotStarted has no row")
	case vec.InProgress:
		if len(vp.Pos) == 0 {
			return nil, errors.New("an InProgress vnode needs a position")
		}
	case vec.Completed:
		if vp.Rows == 0 && len(vp.Pos) != 0 {
			return nil, errors.New("a Completed vnode with 0 rows has a position (an empty vnode has none)")
		}
		if vp.Rows != 0 && len(vp.Pos) == 0 {
			return nil, fmt.Errorf("a Completed vnode with %d rows needs the position of its last row", vp.Rows)
		}
	default:
		return nil, fmt.Errorf("bad backfill state %s", vp.State)
	}
	if vp.Rows < 0 {
		return nil, fmt.Errorf("negative row count %d", vp.Rows)
	}
	if int(v) >= c.up.VnodeCount {
		return nil, fmt.Errorf("vnode out of range 0..%d", c.up.VnodeCount-1)
	}
	w := c.w
	w.Reset()
	binary.LittleEndian.PutUint32(w.Slot(0), uint32(int32(v)))
	if len(vp.Pos) == 0 {
		for _, pc := range c.pos {
			w.PutNull(pc.col)
		}
	} else {
		src := vp.Pos
		for _, pc := range c.pos {
			var err error
			if src, err = c.putPos(pc, src); err != nil {
				return nil, fmt.Errorf("position %x: pk column %s: %w", vp.Pos, pc.name[len(ProgressPosPrefix):], err)
			}
		}
		if len(src) != 0 {
			return nil, fmt.Errorf("position %x: %d bytes left after the last pk column", vp.Pos, len(src))
		}
	}
	if vp.State == vec.Completed {
		w.Slot(c.finished)[0] = 1
	}
	binary.LittleEndian.PutUint64(w.Slot(c.rows), uint64(vp.Rows))
	return w.Finish(dst), nil
}

// putPos decodes one pk column from src into its position column and returns the rest.
func (c *progressCodec) putPos(pc posColumn, src []byte) ([]byte, error) {
	null, src, err := vec.DecodeKeyMarker(src, pc.nullsFirst)
	if err != nil {
		return nil, err
	}
	if null {
		if pc.notNull {
			return nil, errors.New("NULL in a NOT NULL column")
		}
		c.w.PutNull(pc.col)
		return src, nil
	}
	w := c.w
	switch pc.typ.Kind {
	case schema.Boolean:
		var x bool
		if x, src, err = vec.DecodeKeyBool(src, pc.desc); err == nil && x {
			w.Slot(pc.col)[0] = 1
		}
	case schema.Int16:
		var x int16
		if x, src, err = vec.DecodeKeyInt16(src, pc.desc); err == nil {
			binary.LittleEndian.PutUint16(w.Slot(pc.col), uint16(x))
		}
	case schema.Int32, schema.Date:
		var x int32
		if x, src, err = vec.DecodeKeyInt32(src, pc.desc); err == nil {
			binary.LittleEndian.PutUint32(w.Slot(pc.col), uint32(x))
		}
	case schema.Int64, schema.Timestamp, schema.Timestamptz:
		var x int64
		if x, src, err = vec.DecodeKeyInt64(src, pc.desc); err == nil {
			binary.LittleEndian.PutUint64(w.Slot(pc.col), uint64(x))
		}
	case schema.Float32:
		var x float32
		if x, src, err = vec.DecodeKeyFloat32(src, pc.desc); err == nil {
			binary.LittleEndian.PutUint32(w.Slot(pc.col), math.Float32bits(x))
		}
	case schema.Float64:
		var x float64
		if x, src, err = vec.DecodeKeyFloat64(src, pc.desc); err == nil {
			binary.LittleEndian.PutUint64(w.Slot(pc.col), math.Float64bits(x))
		}
	case schema.Decimal:
		var x decimal128.Num
		if x, src, err = vec.DecodeKeyDecimal(src, pc.desc); err == nil {
			s := w.Slot(pc.col)
			binary.LittleEndian.PutUint64(s, x.LowBits())
			binary.LittleEndian.PutUint64(s[8:], uint64(x.HighBits()))
		}
	case schema.Varchar, schema.Bytea:
		if c.scratch, src, err = vec.DecodeKeyBytes(c.scratch[:0], src, pc.desc); err == nil {
			w.PutVar(pc.col, c.scratch)
		}
	default:
		err = fmt.Errorf("unsupported type %s", pc.typ)
	}
	return src, err
}

// decode decodes one stored row (full storage key and value). It accepts exactly the
// rows appendKey and appendValue produce.
func (c *progressCodec) decode(key, val []byte) (uint16, VnodeProgress, error) {
	if len(key) < KeyPrefixLen {
		return 0, VnodeProgress{}, c.corrupt(-1, "truncated key: %d bytes, shorter than the %d-byte table and vnode prefix", len(key), KeyPrefixLen)
	}
	v := binary.BigEndian.Uint16(key[4:])
	iv := int(v)
	if iv >= c.up.VnodeCount {
		return 0, VnodeProgress{}, c.corrupt(iv, "vnode out of range: upstream %s has %d vnodes", c.up.Name, c.up.VnodeCount)
	}
	pk := key[KeyPrefixLen:]
	if len(pk) < vnodePKLen {
		return 0, VnodeProgress{}, c.corrupt(iv, "truncated key: pk of %d bytes, want the %d-byte vnode pk", len(pk), vnodePKLen)
	}
	if len(pk) > vnodePKLen {
		return 0, VnodeProgress{}, c.corrupt(iv, "key has %d bytes after the table and vnode prefix, want the %d-byte vnode pk", len(pk), vnodePKLen)
	}
	if want := vec.AppendKeyInt32(nil, int32(v), false); !bytes.Equal(pk, want) {
		return 0, VnodeProgress{}, c.corrupt(iv, "key's pk %x is not the vnode's %x", pk, want)
	}

	l := c.layout
	switch {
	case len(val) == 0:
		return 0, VnodeProgress{}, c.corrupt(iv, "empty value")
	case val[0] != vec.ValueVersion:
		return 0, VnodeProgress{}, c.corrupt(iv, "unknown value format version %d (want %d)", val[0], vec.ValueVersion)
	case len(val) < l.VarStart:
		return 0, VnodeProgress{}, c.corrupt(iv, "wrong arity: value of %d bytes is shorter than the %d-byte fixed part of the %d-column progress row", len(val), l.VarStart, l.NumColumns)
	}
	if extra := l.NumColumns & 7; extra != 0 && val[l.NullBytes]>>extra != 0 {
		return 0, VnodeProgress{}, c.corrupt(iv, "wrong arity: null bitmap marks columns past the %d of the progress row", l.NumColumns)
	}
	end := uint32(0)
	for _, s := range l.VarSlots {
		e := binary.LittleEndian.Uint32(val[s:])
		if e < end {
			return 0, VnodeProgress{}, c.corrupt(iv, "malformed value: variable-width offsets go backwards (%d after %d)", e, end)
		}
		end = e
	}
	if int64(end) != int64(len(val)-l.VarStart) {
		return 0, VnodeProgress{}, c.corrupt(iv, "wrong arity: value has %d bytes of variable-width data, its offsets say %d", len(val)-l.VarStart, end)
	}
	for _, col := range []int{0, c.finished, c.rows} {
		if vec.ValueIsNull(val, col) {
			return 0, VnodeProgress{}, c.corrupt(iv, "column %s is NULL", c.t.Columns[col].Name)
		}
	}
	if got := int32(binary.LittleEndian.Uint32(val[l.Slot[0]:])); got != int32(v) {
		return 0, VnodeProgress{}, c.corrupt(iv, "value's vnode column is %d, the key's vnode %d", got, v)
	}
	var finished bool
	switch b := val[l.Slot[c.finished]]; b {
	case 0:
	case 1:
		finished = true
	default:
		return 0, VnodeProgress{}, c.corrupt(iv, "column %s holds byte %d, not a boolean", ProgressFinishedColumn, b)
	}
	rows := int64(binary.LittleEndian.Uint64(val[l.Slot[c.rows]:]))
	if rows < 0 {
		return 0, VnodeProgress{}, c.corrupt(iv, "negative row_count %d", rows)
	}
	state := vec.InProgress
	if finished {
		state = vec.Completed
	}

	// Which position columns are NULL; NULL ones must be empty.
	nulls, firstNull, firstSet := 0, -1, -1
	var notNullNull = -1 // a NOT NULL pk column that is NULL
	for i, pc := range c.pos {
		if !vec.ValueIsNull(val, pc.col) {
			if firstSet < 0 {
				firstSet = i
			}
			continue
		}
		nulls++
		if firstNull < 0 {
			firstNull = i
		}
		if pc.notNull && notNullNull < 0 {
			notNullNull = i
		}
		if !c.nullSlotEmpty(val, pc) {
			return 0, VnodeProgress{}, c.corrupt(iv, "malformed value: NULL column %s has data", pc.name)
		}
	}
	allNull := nulls == len(c.pos)

	// A Completed vnode has a position exactly when it has rows; an InProgress one always.
	if finished && rows == 0 {
		if !allNull {
			return 0, VnodeProgress{}, c.corrupt(iv, "Completed with row_count 0 has a position in %s (an empty vnode has none)", c.pos[firstSet].name)
		}
		return v, VnodeProgress{State: vec.Completed}, nil
	}
	if notNullNull >= 0 {
		switch {
		case allNull && !finished:
			return 0, VnodeProgress{}, c.corrupt(iv, "InProgress (%s false) with a NULL position", ProgressFinishedColumn)
		case allNull:
			return 0, VnodeProgress{}, c.corrupt(iv, "Completed with row_count %d and a NULL position (only an empty Completed vnode, row_count 0, has none)", rows)
		default:
			return 0, VnodeProgress{}, c.corrupt(iv, "position is partly NULL: %s is NULL (a NOT NULL pk column) but %s is not", c.pos[notNullNull].name, c.pos[firstSet].name)
		}
	}
	var pos []byte
	for _, pc := range c.pos {
		var err error
		if pos, err = appendPosKey(pos, val, l, pc); err != nil {
			return 0, VnodeProgress{}, c.corrupt(iv, "position does not re-encode: column %s: %v", pc.name, err)
		}
	}
	return v, VnodeProgress{State: state, Pos: pos, Rows: rows}, nil
}

// nullSlotEmpty reports whether a NULL position column holds nothing: a zero fixed slot,
// or an empty variable-width range.
func (c *progressCodec) nullSlotEmpty(val []byte, pc posColumn) bool {
	l := c.layout
	s := l.Slot[pc.col]
	if l.IsVar[pc.col] {
		return len(vec.ValueVar(val, l.VarStart, l.PrevVar[pc.col], s)) == 0
	}
	for _, b := range val[s : s+pc.typ.Width()] {
		if b != 0 {
			return false
		}
	}
	return true
}

// appendPosKey appends the memcomparable encoding of position column pc of a checked
// value. Values the key encoder would not have produced (a boolean byte other than 0
// or 1, a float -0 or a non-canonical NaN) are errors, so that a decoded row is exactly
// the row its progress encodes to.
func appendPosKey(dst, val []byte, l *vec.Layout, pc posColumn) ([]byte, error) {
	if vec.ValueIsNull(val, pc.col) {
		return vec.AppendKeyNull(dst, pc.nullsFirst), nil
	}
	s := val[l.Slot[pc.col]:]
	switch pc.typ.Kind {
	case schema.Boolean:
		if s[0] > 1 {
			return nil, fmt.Errorf("boolean byte %d", s[0])
		}
		return vec.AppendKeyBool(dst, s[0] == 1, pc.desc), nil
	case schema.Int16:
		return vec.AppendKeyInt16(dst, int16(binary.LittleEndian.Uint16(s)), pc.desc), nil
	case schema.Int32, schema.Date:
		return vec.AppendKeyInt32(dst, int32(binary.LittleEndian.Uint32(s)), pc.desc), nil
	case schema.Int64, schema.Timestamp, schema.Timestamptz:
		return vec.AppendKeyInt64(dst, int64(binary.LittleEndian.Uint64(s)), pc.desc), nil
	case schema.Float32:
		bits := binary.LittleEndian.Uint32(s)
		if math.Float32bits(vec.CanonicalFloat32(math.Float32frombits(bits))) != bits {
			return nil, fmt.Errorf("non-canonical float32 bits %#08x", bits)
		}
		return vec.AppendKeyFloat32(dst, math.Float32frombits(bits), pc.desc), nil
	case schema.Float64:
		bits := binary.LittleEndian.Uint64(s)
		if math.Float64bits(vec.CanonicalFloat64(math.Float64frombits(bits))) != bits {
			return nil, fmt.Errorf("non-canonical float64 bits %#016x", bits)
		}
		return vec.AppendKeyFloat64(dst, math.Float64frombits(bits), pc.desc), nil
	case schema.Decimal:
		x := decimal128.New(int64(binary.LittleEndian.Uint64(s[8:])), binary.LittleEndian.Uint64(s))
		return vec.AppendKeyDecimal(dst, x, pc.desc), nil
	case schema.Varchar, schema.Bytea:
		return vec.AppendKeyBytes(dst, vec.ValueVar(val, l.VarStart, l.PrevVar[pc.col], l.Slot[pc.col]), pc.desc), nil
	}
	return nil, fmt.Errorf("unsupported type %s", pc.typ)
}

// scanTable iterates every key of table through the view, with extra (newer) runs on
// top. View.newIter serves one vnode; the progress table is read whole so that keys
// that name no vnode, or one out of range, are found too.
func scanTable(view *View, table uint32, extra []*run) (*Iter, error) {
	lo := binary.BigEndian.AppendUint32(nil, table)
	return view.rangeIter(table, lo, prefixEnd(lo), extra) // nil hi for the last table id
}

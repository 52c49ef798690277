package executors

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/vec"
)

// DefaultBufferBudget is the memory an arrangement backfill's epoch buffer may hold
// before it spills to disk.
const DefaultBufferBudget = 64 << 20

// epochBuffer holds one epoch's upstream chunks in arrival order: in memory up to a
// budget of bytes, then in a spill file (Arrow IPC: the chunk's columns plus its ops
// and visibility as two more columns). Once it has spilled, every later chunk of the
// epoch is spilled too, so the in-memory chunks always precede the spilled ones.
type epochBuffer struct {
	mem    memory.Allocator
	budget int64
	dir    string // "" means os.TempDir()
	name   string // the table, for errors

	chunks  []*vec.Chunk
	used    int64
	file    *os.File
	bw      *bufio.Writer
	w       *ipc.Writer
	schema  *arrow.Schema // spill schema: the columns, __op, __vis
	spilled int           // chunks in the file
	// spills counts chunks written to disk over the buffer's life.
	spills int64
}

func newEpochBuffer(name string, mem memory.Allocator, budget int64, dir string) *epochBuffer {
	if budget <= 0 {
		budget = DefaultBufferBudget
	}
	return &epochBuffer{name: name, mem: mem, budget: budget, dir: dir}
}

// len is the number of chunks buffered.
func (b *epochBuffer) len() int { return len(b.chunks) + b.spilled }

// add takes ownership of c.
func (b *epochBuffer) add(c *vec.Chunk) error {
	size := recordBytes(c.Record())
	if b.w == nil && b.used+size <= b.budget {
		b.chunks = append(b.chunks, c)
		b.used += size
		return nil
	}
	defer c.Release()
	if err := b.spill(c); err != nil {
		return fmt.Errorf("backfill of %s: spill the epoch buffer: %w", b.name, err)
	}
	return nil
}

func (b *epochBuffer) spill(c *vec.Chunk) error {
	rec := c.Record()
	if b.w == nil {
		f, err := os.CreateTemp(b.dir, "weir-backfill-spill-*")
		if err != nil {
			return err
		}
		// The file is anonymous from here on: nothing is left behind by a crash.
		os.Remove(f.Name())
		fields := append([]arrow.Field(nil), rec.Schema().Fields()...)
		fields = append(fields, arrow.Field{Name: "__op", Type: arrow.PrimitiveTypes.Uint8}, arrow.Field{Name: "__vis", Type: arrow.FixedWidthTypes.Boolean})
		b.schema = arrow.NewSchema(fields, nil)
		b.file, b.bw = f, bufio.NewWriterSize(f, 1<<20)
		b.w = ipc.NewWriter(b.bw, ipc.WithSchema(b.schema), ipc.WithAllocator(b.mem))
	}
	n := c.NumRows()
	ob := array.NewUint8Builder(b.mem)
	vb := array.NewBooleanBuilder(b.mem)
	defer ob.Release()
	defer vb.Release()
	ob.Reserve(n)
	vb.Reserve(n)
	for i, op := range c.Ops() {
		ob.UnsafeAppend(uint8(op))
		vb.UnsafeAppend(c.Visible(i))
	}
	ops, vis := ob.NewArray(), vb.NewArray()
	defer ops.Release()
	defer vis.Release()
	cols := append(append([]arrow.Array(nil), rec.Columns()...), ops, vis)
	out := array.NewRecordBatch(b.schema, cols, int64(n))
	defer out.Release()
	if err := b.w.Write(out); err != nil {
		return err
	}
	b.spilled++
	b.spills++
	return nil
}

// drain calls fn with every buffered chunk in arrival order (fn takes ownership) and
// empties the buffer. Spilled chunks are read back one at a time.
func (b *epochBuffer) drain(fn func(c *vec.Chunk) error) error {
	var err error
	for i, c := range b.chunks {
		if err == nil {
			err = fn(c)
		} else {
			c.Release()
		}
		b.chunks[i] = nil
	}
	b.chunks = b.chunks[:0]
	b.used = 0
	if b.w == nil {
		return err
	}
	if rerr := b.readBack(func(c *vec.Chunk) error {
		if err != nil {
			c.Release()
			return nil
		}
		err = fn(c)
		return nil
	}); rerr != nil && err == nil {
		err = fmt.Errorf("backfill of %s: read the spilled epoch buffer: %w", b.name, rerr)
	}
	return err
}

func (b *epochBuffer) readBack(fn func(c *vec.Chunk) error) error {
	defer b.closeFile()
	if err := b.w.Close(); err != nil {
		return err
	}
	if err := b.bw.Flush(); err != nil {
		return err
	}
	if _, err := b.file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	r, err := ipc.NewReader(bufio.NewReaderSize(b.file, 1<<20), ipc.WithAllocator(b.mem))
	if err != nil {
		return err
	}
	defer r.Release()
	ncols := len(b.schema.Fields()) - 2
	dataSchema := arrow.NewSchema(b.schema.Fields()[:ncols], nil)
	read := 0
	for r.Next() {
		rec := r.RecordBatch()
		n := int(rec.NumRows())
		opsCol := rec.Column(ncols).(*array.Uint8)
		visCol := rec.Column(ncols + 1).(*array.Boolean)
		ops := vec.NewOps(b.mem, n, vec.Insert)
		vis := vec.NewBitmap(b.mem, n)
		o, bits := vec.OpsOf(ops.Bytes()), vis.Bytes()
		for i := 0; i < n; i++ {
			o[i] = vec.Op(opsCol.Value(i))
			if visCol.Value(i) {
				bits[i>>3] |= 1 << (i & 7)
			}
		}
		data := array.NewRecordBatch(dataSchema, rec.Columns()[:ncols], int64(n))
		c := vec.NewChunk(data, ops, vis)
		data.Release()
		ops.Release()
		vis.Release()
		if err := fn(c); err != nil {
			return err
		}
		read++
	}
	if err := r.Err(); err != nil {
		return err
	}
	if read != b.spilled {
		return fmt.Errorf("read back %d spilled chunks, wrote %d", read, b.spilled)
	}
	return nil
}

func (b *epochBuffer) closeFile() {
	if b.file != nil {
		b.file.Close()
	}
	b.file, b.bw, b.w, b.spilled = nil, nil, nil, 0
}

// release drops everything buffered.
func (b *epochBuffer) release() error {
	for _, c := range b.chunks {
		c.Release()
	}
	b.chunks, b.used = nil, 0
	var err error
	if b.w != nil {
		err = errors.Join(b.w.Close())
		b.closeFile()
	}
	return err
}

// recordBytes is the size of a record's buffers (shared buffers count fully).
func recordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, col := range rec.Columns() {
		n += dataBytes(col.Data())
	}
	return n
}

func dataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	return n
}

package executors

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// keyColumns returns the columns <prefix>0, <prefix>1, ... of in's columns cols (their
// types, all nullable), with the pk and the distribution key that are all of them in
// order. The columns' types must be checked before: a type with no column type gives
// the zero Type.
func keyColumns(in *arrow.Schema, cols []int, prefix string) ([]schema.Column, []schema.KeyColumn, []int) {
	out := make([]schema.Column, len(cols))
	pk := make([]schema.KeyColumn, len(cols))
	dist := make([]int, len(cols))
	for i, c := range cols {
		typ, _ := schema.TypeOfArrow(in.Field(c).Type)
		out[i] = schema.Column{Name: fmt.Sprintf("%s%d", prefix, i), Type: typ, Nullable: true}
		pk[i] = schema.KeyColumn{Column: i}
		dist[i] = i
	}
	return out, pk, dist
}

// rowKeys encodes the keys of a chunk's rows, some of its columns, as the pk of a table
// of those columns alone (keyColumns): their memcomparable encoding, and their vnodes
// under the distribution key that is the whole key.
type rowKeys struct {
	t   *schema.Table
	k   vec.Kernels
	sch *arrow.Schema // t's Arrow schema
}

// newRowKeys returns the rowKeys of in's columns cols, as a table name of vnodeCount
// vnodes whose columns keyColumns names with prefix.
func newRowKeys(name string, in *arrow.Schema, cols []int, prefix string, vnodeCount int) (rowKeys, error) {
	kc, pk, dist := keyColumns(in, cols, prefix)
	t := &schema.Table{Name: name, Columns: kc, PK: pk, DistKey: dist, VnodeCount: vnodeCount}
	if err := t.Validate(); err != nil {
		return rowKeys{}, err
	}
	return rowKeys{t: t, k: vec.For(t), sch: t.ArrowSchema()}, nil
}

// encode resets keys and appends the key of every row of c, visible or not, made of
// c's columns cols (of the key's types, in its order); it sets vn, of c's length, to
// the rows' vnodes.
func (r rowKeys) encode(c *vec.Chunk, cols []int, keys *vec.Bytes, vn []uint16) {
	rec := c.Record()
	kcols := make([]arrow.Array, len(cols))
	for i, col := range cols {
		kcols[i] = rec.Column(col)
	}
	krec := array.NewRecordBatch(r.sch, kcols, int64(c.NumRows()))
	kc := c.WithRecord(krec)
	krec.Release()
	keys.Reset()
	r.k.EncodeKeys(kc, keys)
	r.k.Vnodes(kc, vn)
	kc.Release()
}

// keyPrefixEnd turns p, in place, into the smallest key above every key starting with
// p; false when there is none (p is empty or all 0xff).
func keyPrefixEnd(p []byte) ([]byte, bool) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0xff {
			p[i]++
			return p[:i+1], true
		}
	}
	return nil, false
}

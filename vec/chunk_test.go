package vec_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

func TestOp(t *testing.T) {
	for _, tc := range []struct {
		op     vec.Op
		s      string
		insert bool
	}{
		{vec.Insert, "+", true}, {vec.Delete, "-", false}, {vec.UpdateDelete, "U-", false},
		{vec.UpdateInsert, "U+", true}, {vec.Op(9), "op(9)", false},
	} {
		if tc.op.String() != tc.s || tc.op.IsInsert() != tc.insert {
			t.Errorf("op %d: %q %v, want %q %v", uint8(tc.op), tc.op.String(), tc.op.IsInsert(), tc.s, tc.insert)
		}
	}
	if vec.OpsOf(nil) != nil {
		t.Error("OpsOf(nil) != nil")
	}
	b := []byte{0, 2, 3}
	if ops := vec.OpsOf(b); len(ops) != 3 || ops[1] != vec.UpdateDelete {
		t.Errorf("OpsOf: %v", ops)
	}
	for _, s := range []vec.BackfillState{vec.NotStarted, vec.InProgress, vec.Completed, 7} {
		if s.String() == "" || (s == 7) != strings.HasPrefix(s.String(), "BackfillState(") {
			t.Errorf("BackfillState %d: %q", uint8(s), s.String())
		}
	}
}

func TestChunk(t *testing.T) {
	mem := checkedMem(t)
	tab := table(t, "c", []schema.Column{col("k", schema.Int32, false)}, schema.KeyColumn{Column: 0})
	bs := vectest.BuildersFor(mem, tab, []int{0})
	bs[0].(*array.Int32Builder).AppendValues([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, nil)
	rec := vectest.FinishRecord(tab, []int{0}, bs, 10)

	ops := vec.NewOps(mem, 10, vec.Delete)
	if got := vec.OpsOf(ops.Bytes()); len(got) != 10 || got[9] != vec.Delete {
		t.Fatalf("NewOps: %v", got)
	}
	vis := vec.NewBitmap(mem, 10)
	if vis.Len() != 2 || vis.Bytes()[0] != 0 || vis.Bytes()[1] != 0 {
		t.Fatalf("NewBitmap: %x", vis.Bytes())
	}
	vis.Bytes()[0] = 0b10100101
	vis.Bytes()[1] = 0b10

	c := vec.NewChunk(rec, ops, nil)
	// The chunk holds its own references.
	rec.Release()
	ops.Release()
	if c.NumRows() != 10 || c.CountVisible() != 10 || !c.Visible(9) || c.Visibility() != nil || c.OpsBuffer() != ops {
		t.Fatal("chunk without visibility")
	}
	d := c.WithVisibility(vis)
	if d.CountVisible() != 5 || d.Visible(1) || !d.Visible(0) || !d.Visible(9) || d.Record() != c.Record() {
		t.Fatalf("WithVisibility: %d visible", d.CountVisible())
	}
	newOps := vec.NewOps(mem, 10, vec.Insert)
	e := d.WithOpsAndVisibility(newOps, nil)
	newOps.Release()
	vis.Release()
	if e.Ops()[0] != vec.Insert || d.Ops()[0] != vec.Delete || e.CountVisible() != 10 {
		t.Fatal("WithOpsAndVisibility")
	}
	e.Retain()
	e.Release()
	c.Release()
	d.Release()
	if e.Record().NumRows() != 10 { // still alive through e
		t.Fatal("record released early")
	}
	e.Release()
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "released too many times") {
				t.Errorf("extra Release: recovered %v", r)
			}
		}()
		e.Release()
	}()
}

func TestNewChunkPanics(t *testing.T) {
	mem := checkedMem(t)
	tab := table(t, "c", []schema.Column{col("k", schema.Int32, false)}, schema.KeyColumn{Column: 0})
	bs := vectest.BuildersFor(mem, tab, []int{0})
	bs[0].(*array.Int32Builder).AppendValues(make([]int32, 20), nil)
	rec := vectest.FinishRecord(tab, []int{0}, bs, 20)
	defer rec.Release()
	short := vec.NewOps(mem, 19, vec.Insert)
	defer short.Release()
	ops := vec.NewOps(mem, 20, vec.Insert)
	defer ops.Release()
	shortVis := vec.NewBitmap(mem, 16)
	defer shortVis.Release()
	for _, tc := range []struct {
		name string
		f    func()
		want string
	}{
		{"nil ops", func() { vec.NewChunk(rec, nil, nil) }, "needs 20 op bytes"},
		{"short ops", func() { vec.NewChunk(rec, short, nil) }, "needs 20 op bytes"},
		{"short visibility", func() { vec.NewChunk(rec, ops, shortVis) }, "visibility bitmap too short"},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), tc.want) {
					t.Errorf("%s: recovered %v, want %q", tc.name, r, tc.want)
				}
			}()
			tc.f()
		}()
	}
}

func TestBytes(t *testing.T) {
	var b vec.Bytes
	if b.Len() != 0 {
		t.Fatal("zero Bytes not empty")
	}
	b.Append([]byte("ab"))
	b.Append(nil)
	b.Data = append(b.Data, "xyz"...)
	b.Commit()
	if b.Len() != 3 || string(b.At(0)) != "ab" || len(b.At(1)) != 0 || string(b.At(2)) != "xyz" {
		t.Fatalf("Bytes: %d %q %q %q", b.Len(), b.At(0), b.At(1), b.At(2))
	}
	// At is capped: appending to it cannot overwrite the next string.
	s := append(b.At(0), '!')
	_ = s
	if string(b.At(2)) != "xyz" {
		t.Fatal("appending to At(0) overwrote At(1)")
	}
	data := &b.Data[0]
	b.Reset()
	if b.Len() != 0 {
		t.Fatal("Reset did not empty")
	}
	var fresh vec.Bytes
	fresh.Data = append(fresh.Data, 'q')
	fresh.Commit()
	if fresh.Len() != 1 || string(fresh.At(0)) != "q" {
		t.Fatal("Commit on a zero Bytes")
	}
	b.Append([]byte("k"))
	if &b.Data[0] != data {
		t.Fatal("Reset dropped the memory")
	}
}

func TestNullable(t *testing.T) {
	if v := vec.Some(int64(3)); !v.Valid || v.Value != 3 {
		t.Error("Some")
	}
	if v := vec.Null[string](); v.Valid || v.Value != "" {
		t.Error("Null")
	}
}

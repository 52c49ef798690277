package sim

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/vec"
)

func (r *runner) randKey() int64 {
	switch x := r.drng.IntN(10); {
	case x < 4:
		// A hot vnode.
		ks := r.byVnode[r.hot[r.drng.IntN(len(r.hot))]]
		if len(ks) > 0 {
			return ks[r.drng.IntN(len(ks))]
		}
	case x < 6:
		// Near a backfill's position.
		if k, ok := r.nearPosition(); ok {
			return k
		}
	}
	return r.drng.Int64N(r.domain)
}

// nearPosition returns a key a few steps from the committed position of an InProgress
// vnode of a backfill over a.
func (r *runner) nearPosition() (int64, bool) {
	delta := int64(r.drng.IntN(7)) - 3
	pick := r.drng.IntN(1 << 20)
	var cands [][]byte
	for _, v := range r.views {
		for _, p := range v.last {
			if p.Upstream == "a" && p.State == vec.InProgress && len(p.Position) > 0 {
				cands = append(cands, p.Position)
			}
		}
	}
	if len(cands) == 0 {
		return 0, false
	}
	k, err := decodeK(cands[pick%len(cands)])
	if err != nil {
		return 0, false
	}
	return max(0, k+delta), true
}

func decodeK(key []byte) (int64, error) {
	null, rest, err := vec.DecodeKeyMarker(key, false)
	if err != nil || null {
		return 0, fmt.Errorf("bad key %x", key)
	}
	k, _, err := vec.DecodeKeyInt64(rest, false)
	return k, err
}

func (r *runner) randA(k int64) aRow {
	row := aRow{k: k, g: r.drng.Int64N(r.groups), v: r.drng.Int64N(1000)}
	if r.drng.IntN(5) > 0 {
		s := fmt.Sprintf("s%d", r.drng.IntN(100))
		row.s = &s
	}
	return row
}

// existing returns up to n distinct existing keys of a, chosen around random keys.
func (r *runner) existing(n int) []int64 {
	keys := map[int64]bool{}
	for i := 0; i < 4*n && len(keys) < n; i++ {
		k := r.randKey()
		for d := int64(0); d < 8; d++ {
			if _, ok := r.cur.a[k+d]; ok {
				keys[k+d] = true
				break
			}
		}
	}
	out := make([]int64, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (r *runner) writeA(what string, op func(context.Context, string, arrow.RecordBatch) error, rows []aRow) error {
	if len(rows) == 0 {
		return nil
	}
	rec := recordA(r.mem, r.ta, rows)
	defer rec.Release()
	if err := r.call(what+" into a", func(ctx context.Context) error { return op(ctx, "a", rec) }); err != nil {
		return err
	}
	r.pending++
	return nil
}

func (r *runner) writeStep(op string) error {
	n := 1 + r.rng.IntN(40)
	var rows []aRow
	switch op {
	case "insert":
		seen := map[int64]bool{}
		for i := 0; i < n; i++ {
			k := r.randKey()
			if seen[k] {
				continue
			}
			seen[k] = true
			rows = append(rows, r.randA(k))
		}
		if err := r.writeA("insert", r.e.Insert, rows); err != nil {
			return err
		}
		for _, x := range rows {
			r.cur.a[x.k] = x
		}
	case "update":
		for _, k := range r.existing(n) {
			rows = append(rows, r.randA(k))
		}
		if err := r.writeA("update", r.e.Update, rows); err != nil {
			return err
		}
		for _, x := range rows {
			r.cur.a[x.k] = x
		}
	case "pk_update":
		// Delete rows and insert them under new keys in the same epoch.
		var dels, ins []aRow
		taken := map[int64]bool{}
		for _, k := range r.existing(1 + r.rng.IntN(5)) {
			nk := r.randKey()
			if _, ok := r.cur.a[nk]; ok || taken[nk] {
				continue
			}
			taken[nk] = true
			old := r.cur.a[k]
			dels = append(dels, old)
			nr := old
			nr.k, nr.v = nk, (old.v+1)%1000
			ins = append(ins, nr)
			if r.straddles(k, nk) {
				r.rep.Sometimes["update_straddling_position"]++
			}
		}
		if err := r.writeA("pk-changing update (delete)", r.e.Delete, dels); err != nil {
			return err
		}
		for _, x := range dels {
			delete(r.cur.a, x.k)
		}
		if err := r.writeA("pk-changing update (insert)", r.e.Insert, ins); err != nil {
			return err
		}
		for _, x := range ins {
			r.cur.a[x.k] = x
		}
		rows = ins
	case "delete":
		for _, k := range r.existing(n) {
			rows = append(rows, r.cur.a[k])
		}
		if err := r.writeA("delete", r.e.Delete, rows); err != nil {
			return err
		}
		for _, x := range rows {
			delete(r.cur.a, x.k)
		}
	case "range_delete":
		lo := r.randKey()
		hi := lo + int64(20+r.rng.IntN(300))
		for k := lo; k < hi; k++ {
			if x, ok := r.cur.a[k]; ok {
				rows = append(rows, x)
			}
		}
		if err := r.writeA("range delete", r.e.Delete, rows); err != nil {
			return err
		}
		for _, x := range rows {
			delete(r.cur.a, x.k)
		}
		if len(rows) >= 20 {
			for _, v := range r.views {
				if (r.paused || (v.limit != nil && *v.limit <= 1)) && !r.done(v) {
					r.rep.Sometimes["pause_during_tombstone_run"]++
					break
				}
			}
		}
	case "b":
		var bs []bRow
		seen := map[int64]bool{}
		for i := 0; i < 1+r.drng.IntN(8); i++ {
			id := r.drng.Int64N(r.groups + 3)
			if !seen[id] {
				seen[id] = true
				bs = append(bs, bRow{id: id, w: r.drng.Int64N(100)})
			}
		}
		del := r.rng.IntN(3) == 0
		rec := recordB(r.mem, r.tb, bs)
		defer rec.Release()
		fn, what := r.e.Insert, "insert into b"
		if del {
			fn, what = r.e.Delete, "delete from b"
		}
		if err := r.call(what, func(ctx context.Context) error { return fn(ctx, "b", rec) }); err != nil {
			return err
		}
		r.pending++
		for _, x := range bs {
			if del {
				delete(r.cur.b, x.id)
			} else {
				r.cur.b[x.id] = x
			}
		}
		r.rep.RowsByOp["b_"+what[:6]] += int64(len(bs))
		r.tracef("%s: %d rows", what, len(bs))
		return nil
	}
	r.rep.RowsByOp[op] += int64(len(rows))
	r.tracef("%s: %d rows", op, len(rows))
	return nil
}

// straddles reports whether, for some unfinished backfill over a, one of the keys is
// already backfilled (at or below its vnode's committed position, or in a Completed
// vnode) and the other is not.
func (r *runner) straddles(k1, k2 int64) bool {
	for _, v := range r.views {
		if r.done(v) {
			continue
		}
		in := func(k int64) (bool, bool) {
			var buf []byte
			buf = vec.AppendKeyInt64(append(buf, vec.KeyNullMarker(false)), k, false)
			vn := r.vnodeOfK(k)
			for _, p := range v.last {
				if p.Upstream == "a" && p.Scan == 0 && int(p.Vnode) == vn {
					return backfilled(p, buf), true
				}
			}
			return false, false
		}
		b1, ok1 := in(k1)
		b2, ok2 := in(k2)
		if ok1 && ok2 && b1 != b2 {
			return true
		}
	}
	return false
}

func (r *runner) vnodeOfK(k int64) int {
	for v, ks := range r.byVnode {
		if i := sort.Search(len(ks), func(i int) bool { return ks[i] >= k }); i < len(ks) && ks[i] == k {
			return v
		}
	}
	return -1
}

// backfilled reports whether an upstream row with pk key is in a backfill's committed
// prefix: its vnode is Completed, or InProgress with the position at or after key.
func backfilled(p engine.VnodeProgress, key []byte) bool {
	switch p.State {
	case vec.Completed:
		return true
	case vec.InProgress:
		return p.Position != nil && string(key) <= string(p.Position)
	}
	return false
}

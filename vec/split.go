package vec

import "github.com/apache/arrow-go/v18/arrow/bitutil"

// SplitOutput is one output of a split: the rows of the chunk that go there, as a
// visibility bitmap over the same record, and the ops to use with it (the chunk's own
// ops, except where an update pair was split between two outputs).
type SplitOutput struct {
	Vis  []byte // bit i set: row i goes to this output
	Ops  []Op   // valid when OwnOps; otherwise use the chunk's ops
	Rows int    // number of rows sent here
	// OwnOps is set when an update pair was split across outputs: Ops then holds the
	// chunk's ops with the pair's halves turned into Delete (here) or Insert (there).
	OwnOps bool
}

func (o *SplitOutput) reset(n int) {
	nb := int(bitutil.BytesForBits(int64(n)))
	if cap(o.Vis) < nb {
		o.Vis = make([]byte, nb)
	}
	o.Vis = o.Vis[:nb]
	clear(o.Vis)
	o.Rows = 0
	o.OwnOps = false
}

// SplitByDest sends every visible row i of c to outs[mapping[vnodes[i]]]. An UpdateDelete and its
// UpdateInsert (the next visible row) that go to different outputs become a Delete in
// the first and an Insert in the second: each output alone stays a valid changelog.
func SplitByDest(c *Chunk, vnodes, mapping []uint16, outs []SplitOutput) {
	n := c.NumRows()
	for i := range outs {
		outs[i].reset(n)
	}
	vis := c.Visibility()
	ops := c.Ops()
	pending := -1 // row of an UpdateDelete waiting for its UpdateInsert
	for i := 0; i < n; i++ {
		if vis != nil && vis[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		d := mapping[vnodes[i]]
		o := &outs[d]
		o.Vis[i>>3] |= 1 << (i & 7)
		o.Rows++
		switch ops[i] {
		case UpdateDelete:
			pending = i
		case UpdateInsert:
			if pending >= 0 && mapping[vnodes[pending]] != d {
				setOwnOp(&outs[mapping[vnodes[pending]]], ops, pending, Delete)
				setOwnOp(o, ops, i, Insert)
			}
			pending = -1
		default:
			pending = -1
		}
	}
}

func setOwnOp(o *SplitOutput, ops []Op, i int, op Op) {
	if !o.OwnOps {
		o.Ops = append(o.Ops[:0], ops...)
		o.OwnOps = true
	}
	o.Ops[i] = op
}

// RepairUpdatePairs fixes update pairs that a filter (vis) has split: a kept
// UpdateDelete whose UpdateInsert was dropped becomes Delete, a kept UpdateInsert
// whose UpdateDelete was dropped becomes Insert. Pairs are found among the rows visible
// in orig (nil: all) — the chunk before filtering; a nil vis means nothing was filtered.
// It returns ops unchanged when nothing
// needs repair, or a copy in scratch (reused when large enough) with the repairs.
func RepairUpdatePairs(ops []Op, orig, vis []byte, scratch []Op) []Op {
	if vis == nil {
		return ops // nothing was filtered out
	}
	n := len(ops)
	out := ops
	copied := false
	set := func(i int, op Op) {
		if !copied {
			scratch = append(scratch[:0], ops...)
			out = scratch
			copied = true
		}
		out[i] = op
	}
	pending := -1
	for i := 0; i < n; i++ {
		if orig != nil && orig[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		switch ops[i] {
		case UpdateDelete:
			pending = i
		case UpdateInsert:
			if pending >= 0 {
				keptD := vis[pending>>3]&(1<<(pending&7)) != 0
				keptI := vis[i>>3]&(1<<(i&7)) != 0
				if keptD && !keptI {
					set(pending, Delete)
				} else if keptI && !keptD {
					set(i, Insert)
				}
			}
			pending = -1
		default:
			pending = -1
		}
	}
	return out
}

// Bit is 1 for true and 0 for false, without a branch: kernels accumulate per-row
// decisions into bitmap words with it.
func Bit(b bool) uint64 {
	var x uint64
	if b {
		x = 1
	}
	return x
}

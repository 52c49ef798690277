package gen

import (
	"slices"

	"github.com/dave/jennifer/jen"
	"github.com/seed04fbb902/weir/schema"
)

// decodeValues emits the projected decode: check every value's frame once with
// straight-line code, then for each projected column run one typed loop over the batch
// (dispatch once per column). Fixed-width columns are decoded into a stack buffer and
// appended in bulk, so validity bits are set a word at a time. Var-width columns go
// into a *vec.VarBuilder reserved for the batch's bytes, which the frame check sums
// per column when the projection has one.
func (g *tableGen) decodeValues(f *jen.File, recv func(string) *jen.Statement, errf func(string, ...jen.Code) jen.Code) {
	const step = 256
	stepConst := jen.Id("step")
	rowOff := jen.Id("o").Op(":=").Int().Call(jen.Id("offs").Index(jen.Id("i")))
	at := func(off jen.Code) jen.Code {
		return jen.Id("data").Index(jen.Id("o").Op("+").Add(off), jen.Empty())
	}
	// <c>Total sums the bytes of var-width column <c> over the batch, in the loop that
	// checks the values' frames (which reads the same words), so that each column
	// reserves its bytes without a pass of its own.
	total := func(i int) *jen.Statement { return jen.Id(g.locals[i] + "Total") }
	cases := []jen.Code{}
	for i, c := range g.t.Columns {
		kd := g.kind(i)
		by, bit := nullBit(i)
		isNull := jen.Id("data").Index(jen.Id("o").Op("+").Lit(by)).Op("&").Lit(bit).Op("!=").Lit(0)
		body := append(g.valueBuilder(i, func(err jen.Code) jen.Code { return jen.Return(err) }, errf),
			jen.Id("b").Dot("Reserve").Call(jen.Id("n")),
		)
		if !kd.varLen {
			slot := func(off int) jen.Code { return at(g.slot(i, off)) }
			inner := []jen.Code{rowOff, jen.Id("tmp").Index(jen.Id("i").Op("-").Id("lo")).Op("=").Add(kd.getValue(slot))}
			var valid jen.Code = jen.Nil()
			decl := []jen.Code{jen.Var().Id("tmp").Index(stepConst).Add(kd.goType())}
			if c.Nullable {
				decl = append(decl, jen.Var().Id("valid").Index(stepConst).Bool())
				inner = append(inner, jen.Id("valid").Index(jen.Id("i").Op("-").Id("lo")).Op("=").Op("!").Parens(isNull))
				valid = jen.Id("valid").Index(jen.Empty(), jen.Id("hi").Op("-").Id("lo"))
			}
			body = append(body, decl...)
			body = append(body, jen.For(jen.Id("lo").Op(":=").Lit(0), jen.Id("lo").Op("<").Id("n"), jen.Id("lo").Op("+=").Add(stepConst)).Block(
				jen.Id("hi").Op(":=").Min(jen.Id("n"), jen.Id("lo").Op("+").Add(stepConst)),
				jen.For(jen.Id("i").Op(":=").Id("lo"), jen.Id("i").Op("<").Id("hi"), jen.Id("i").Op("++")).Block(inner...),
				jen.Id("b").Dot("AppendValues").Call(jen.Id("tmp").Index(jen.Empty(), jen.Id("hi").Op("-").Id("lo")), valid),
			))
		} else {
			start, end := g.varBounds(i, func() *jen.Statement { return jen.Id("o") }, at)
			inner := []jen.Code{rowOff}
			if c.Nullable {
				inner = append(inner, jen.If(isNull).Block(jen.Id("b").Dot("AppendNull").Call(), jen.Continue()))
			}
			inner = append(inner,
				jen.Id("start").Op(":=").Add(start),
				jen.Id("end").Op(":=").Add(end),
				jen.Id("b").Dot("UnsafeAppend").Call(jen.Id("data").Index(jen.Id("start"), jen.Id("end"))),
			)
			body = append(body,
				jen.Id("b").Dot("ReserveData").Call(total(i)),
				jen.For(jen.Id("i").Op(":=").Lit(0), jen.Id("i").Op("<").Id("n"), jen.Id("i").Op("++")).Block(inner...),
			)
		}
		cases = append(cases, jen.Case(g.colConst(i)).Block(body...))
	}
	cases = append(cases, jen.Default().Block(
		jen.Return(errf("projection names column %d, the table has %d", jen.Id("col"), jen.Lit(len(g.t.Columns)))),
	))
	check := []jen.Code{
		jen.Id("v").Op(":=").Id("data").Index(jen.Id("offs").Index(jen.Id("i")), jen.Id("offs").Index(jen.Id("i").Op("+").Lit(1))),
		g.checkValue(jen.Return(errf("value %d: %w", jen.Id("i"), jen.Err()))),
	}
	var totalsDecl []jen.Code
	if len(g.varCols) > 0 {
		names := []jen.Code{}
		sum := []jen.Code{}
		varCols := []jen.Code{}
		endOf := func(i int) jen.Code {
			return jen.Int().Call(le("Uint32").Call(jen.Id("v").Index(g.slot(i, 0), jen.Empty())))
		}
		for k, i := range g.varCols {
			names = append(names, total(i))
			varCols = append(varCols, g.colConst(i))
			if k == 0 {
				sum = append(sum, total(i).Op("+=").Add(endOf(i)))
			} else {
				sum = append(sum, total(i).Op("+=").Add(endOf(i)).Op("-").Add(endOf(g.varCols[k-1])))
			}
		}
		// The sums are taken only when the projection has a var-width column.
		check = append(check, jen.If(jen.Id("sums")).Block(sum...))
		totalsDecl = []jen.Code{
			jen.Var().List(names...).Int(),
			jen.Id("sums").Op(":=").False(),
			jen.For(jen.List(jen.Id("_"), jen.Id("col")).Op(":=").Range().Id("proj")).Block(
				jen.Switch(jen.Id("col")).Block(jen.Case(varCols...).Block(jen.Id("sums").Op("=").True())),
			),
		}
	}
	// Fixed-width columns are decoded step rows at a time.
	var stepDef []jen.Code
	if len(g.varCols) < len(g.t.Columns) {
		stepDef = []jen.Code{jen.Add(stepConst).Op("=").Lit(step).Comment("rows a fixed-width column decodes into its buffer at a time")}
	}
	g.valueCheck(f)
	f.Comment("DecodeValues implements vec.Kernels: one typed loop per projected column; the")
	f.Comment("columns outside the projection are never read.")
	stmts := []jen.Code{
		jen.If(jen.Len(jen.Id("out")).Op("<").Len(jen.Id("proj"))).Block(
			jen.Return(errf("DecodeValues needs %d builders, got %d", jen.Len(jen.Id("proj")), jen.Len(jen.Id("out")))),
		),
		g.layoutConsts(len(g.varCols) > 0, g.allColumns(), stepDef...),
		jen.Id("n").Op(":=").Id("vals").Dot("Len").Call(),
		jen.List(jen.Id("data"), jen.Id("offs")).Op(":=").List(jen.Id("vals").Dot("Data"), jen.Id("vals").Dot("Offsets")),
	}
	stmts = append(stmts, totalsDecl...)
	stmts = append(stmts,
		jen.For(jen.Id("i").Op(":=").Lit(0), jen.Id("i").Op("<").Id("n"), jen.Id("i").Op("++")).Block(check...),
		jen.For(jen.List(jen.Id("j"), jen.Id("col")).Op(":=").Range().Id("proj")).Block(
			jen.Switch(jen.Id("col")).Block(cases...),
		),
		jen.Return(jen.Nil()),
	)
	recv("DecodeValues").Params(
		jen.Id("vals").Op("*").Qual(pkgVec, "Bytes"),
		jen.Id("proj").Qual(pkgVec, "Projection"),
		jen.Id("out").Index().Qual(pkgVec, "Builder"),
	).Error().Block(stmts...)
}

// allColumns is every column index of the table, in order.
func (g *tableGen) allColumns() []int {
	out := make([]int, len(g.t.Columns))
	for i := range out {
		out[i] = i
	}
	return out
}

// valueBuilder is the statements that take out[j] as b, the builder of column i's
// values (see vec.NewBuilder), or return ret(an error naming the column).
func (g *tableGen) valueBuilder(i int, ret func(err jen.Code) jen.Code, errf func(string, ...jen.Code) jen.Code) []jen.Code {
	c, kd := g.col(i), g.kind(i)
	// Var-width columns decode into a *vec.VarBuilder (see vec.NewBuilder), whose
	// UnsafeAppend inlines into the loop.
	bt, btName := jen.Op("*").Qual(pkgArray, kd.builder), "*array."+kd.builder
	if kd.varLen {
		bt, btName = jen.Op("*").Qual(pkgVec, "VarBuilder"), "*vec.VarBuilder"
	}
	// The Arrow type is checked too (a utf8 VarBuilder for a bytea column, a
	// timestamp builder of another zone), as the generic path does.
	want := jen.Id("want")
	return []jen.Code{
		jen.List(jen.Id("b"), jen.Id("ok")).Op(":=").Id("out").Index(jen.Id("j")).Assert(bt),
		jen.If(jen.Op("!").Id("ok")).Block(ret(errf("column "+c.Name+": builder is %T, want "+btName, jen.Id("out").Index(jen.Id("j"))))),
		jen.Add(want).Op(":=").Id(g.id(schema.IdentArrowSchema)).Dot("Field").Call(g.colConst(i)).Dot("Type"),
		jen.If(jen.Op("!").Qual(pkgArrow, "TypeEqual").Call(jen.Id("b").Dot("Type").Call(), want)).Block(
			ret(errf("column "+c.Name+": builder of %s, want %s", jen.Id("b").Dot("Type").Call(), want)),
		),
	}
}

// checkValue is the statement that checks the value v with gValueOK and, when it is
// malformed, sets err to CheckValue's reason and runs fail.
func (g *tableGen) checkValue(fail jen.Code) jen.Code {
	return jen.If(jen.Op("!").Id(g.id(schema.IdentValueOK)).Call(jen.Id("v"))).Block(
		jen.Err().Op(":=").Id(g.id(schema.IdentLayout)).Dot("CheckValue").Call(jen.Id("v")),
		jen.If(jen.Err().Op("==").Nil()).Block(
			jen.Err().Op("=").Qual("errors", "New").Call(jen.Lit("malformed value")),
		),
		fail,
	)
}

// valueCheck emits gValueOK: the conditions of vec.Layout.CheckValue as straight-line
// code over the table's constant layout.
func (g *tableGen) valueCheck(f *jen.File) {
	l := g.layout
	conds := []jen.Code{
		jen.Len(jen.Id("v")).Op("<").Id(varStart),
		jen.Id("v").Index(jen.Lit(0)).Op("!=").Qual(pkgVec, "ValueVersion"),
	}
	for b := 0; b < l.NullBytes; b++ {
		mask := int(l.NotNull[b])
		if b == l.NullBytes-1 && l.NumColumns&7 != 0 {
			mask |= 0xFF << (l.NumColumns & 7) & 0xFF
		}
		if mask != 0 {
			conds = append(conds, jen.Id("v").Index(jen.Lit(1+b)).Op("&").Lit(mask).Op("!=").Lit(0))
		}
	}
	body := []jen.Code{g.layoutConsts(true, g.varCols)}
	cond := conds[0]
	for _, c := range conds[1:] {
		cond = jen.Add(cond).Op("||").Add(c)
	}
	body = append(body, jen.If(cond).Block(jen.Return(jen.False())))
	if len(g.varCols) == 0 {
		body = append(body, jen.Return(jen.Len(jen.Id("v")).Op("==").Id(varStart)))
	} else {
		var prev jen.Code
		for _, i := range g.varCols {
			e := jen.Id(g.locals[i] + "End")
			body = append(body, jen.Add(e).Op(":=").Add(le("Uint32")).Call(jen.Id("v").Index(g.slot(i, 0), jen.Empty())))
			if prev != nil {
				body = append(body, jen.If(jen.Add(e).Op("<").Add(prev)).Block(jen.Return(jen.False())))
			}
			prev = e
		}
		body = append(body, jen.Return(jen.Int().Call(prev).Op("==").Len(jen.Id("v")).Op("-").Id(varStart)))
	}
	f.Commentf("%s reports whether v is a well-formed row value of table %s (see vec.Layout.CheckValue).", g.id(schema.IdentValueOK), g.t.Name)
	f.Func().Id(g.id(schema.IdentValueOK)).Params(jen.Id("v").Index().Byte()).Bool().Block(body...)
}

// The generated functions that read or write row values name the value layout's
// offsets with constants local to them (layoutConsts): varStart, where the var-width
// bytes begin, and <c>Slot for each column <c> (localBases), the offset of its
// fixed-width value or, for a var-width column, of the end offset of its bytes.
const varStart = "varStart"

func (g *tableGen) slotName(i int) string { return g.locals[i] + "Slot" }

// slot is the offset of column i's slot plus off, in its named constant.
func (g *tableGen) slot(i, off int) *jen.Statement {
	s := jen.Id(g.slotName(i))
	if off != 0 {
		s.Op("+").Lit(off)
	}
	return s
}

// layoutConsts declares the layout constants a generated function uses: varStart
// when withStart, and the slot of each column of cols, after the constants extra.
func (g *tableGen) layoutConsts(withStart bool, cols []int, extra ...jen.Code) jen.Code {
	defs := extra
	if withStart {
		defs = append(defs, jen.Id(varStart).Op("=").Len(jen.Id(g.id(schema.IdentValueZero))).Comment("the var-width bytes follow the fixed-width part"))
	}
	for _, i := range cols {
		c := g.col(i)
		what := c.Name + " " + c.Type.String()
		if g.kind(i).varLen {
			what += ": the end offset of its bytes"
		}
		defs = append(defs, jen.Id(g.slotName(i)).Op("=").Lit(g.layout.Slot[i]).Comment(what))
	}
	if len(defs) == 0 {
		return jen.Null()
	}
	return jen.Const().Defs(defs...)
}

// varBounds is the start and end, from base, of var-width column i's bytes in a row
// value read by at (at(x) is the value's bytes from offset x on): the previous
// var-width column's end, or varStart, and its own end.
func (g *tableGen) varBounds(i int, base func() *jen.Statement, at func(off jen.Code) jen.Code) (start, end jen.Code) {
	from := func(x jen.Code) jen.Code {
		b := base()
		if b == nil {
			return jen.Id(varStart).Op("+").Add(x)
		}
		return b.Op("+").Id(varStart).Op("+").Add(x)
	}
	endOf := func(col int) jen.Code { return jen.Int().Call(le("Uint32").Call(at(g.slot(col, 0)))) }
	k := slices.Index(g.varCols, i)
	if k == 0 {
		b := base()
		if b == nil {
			start = jen.Id(varStart)
		} else {
			start = b.Op("+").Id(varStart)
		}
	} else {
		start = from(endOf(g.varCols[k-1]))
	}
	return start, from(endOf(i))
}

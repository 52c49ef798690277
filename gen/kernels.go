package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
	"github.com/seed04fbb902/weir/schema"
)

func (g *tableGen) kernels(f *jen.File) {
	K := g.id(schema.IdentKernels)
	tbl := g.id(schema.IdentTableVar)
	f.Commentf("%s are the generated kernels of table %s (vec.Kernels).", K, g.t.Name)
	f.Type().Id(K).Struct()
	f.Var().Id("_").Qual(pkgVec, "Kernels").Op("=").Id(K).Values()
	f.Func().Id("init").Params().Block(jen.Qual(pkgVec, "Register").Call(jen.Id(K).Values()))
	f.Commentf("%s returns the generated kernels of table %s.", g.id(schema.IdentKernelsFunc), g.t.Name)
	f.Func().Id(g.id(schema.IdentKernelsFunc)).Params().Qual(pkgVec, "Kernels").Block(jen.Return(jen.Id(K).Values()))

	recv := func(name string) *jen.Statement { return g.method(f, schema.IdentKernels, "", false, name) }
	errf := func(format string, args ...jen.Code) jen.Code {
		return jen.Qual("fmt", "Errorf").Call(append([]jen.Code{jen.Lit("table " + g.t.Name + ": " + format)}, args...)...)
	}
	chunk := jen.Id("c").Op("*").Qual(pkgVec, "Chunk")

	f.Comment("Table implements vec.Kernels.")
	recv("Table").Params().Op("*").Qual(pkgSchema, "Table").Block(jen.Return(jen.Id(tbl)))
	f.Comment("Generated implements vec.Kernels.")
	recv("Generated").Params().Bool().Block(jen.Return(jen.True()))

	loopRows := func(body ...jen.Code) jen.Code {
		return jen.For(jen.List(jen.Id("i"), jen.Id("n")).Op(":=").List(jen.Lit(0), jen.Id("v").Dot("NumRows").Call()), jen.Id("i").Op("<").Id("n"), jen.Id("i").Op("++")).Block(body...)
	}
	f.Comment("EncodeKeys implements vec.Kernels.")
	recv("EncodeKeys").Params(chunk, jen.Id("out").Op("*").Qual(pkgVec, "Bytes")).Block(
		jen.Id("v").Op(":=").Id(g.id(schema.IdentViewOf)).Call(jen.Id("c")),
		loopRows(
			jen.Id("out").Dot("Data").Op("=").Id("v").Dot("AppendKey").Call(jen.Id("out").Dot("Data"), jen.Id("i")),
			jen.Id("out").Dot("Commit").Call(),
		),
	)
	f.Comment("EncodeValues implements vec.Kernels.")
	recv("EncodeValues").Params(chunk, jen.Id("out").Op("*").Qual(pkgVec, "Bytes")).Block(
		jen.Id("v").Op(":=").Id(g.id(schema.IdentViewOf)).Call(jen.Id("c")),
		loopRows(
			jen.Id("out").Dot("Data").Op("=").Id("v").Dot("AppendValue").Call(jen.Id("out").Dot("Data"), jen.Id("i")),
			jen.Id("out").Dot("Commit").Call(),
		),
	)

	// DecodeKeys: type-assert the builders once, then decode key by key.
	body := []jen.Code{
		jen.If(jen.Len(jen.Id("out")).Op("!=").Lit(len(g.t.PK))).Block(
			jen.Return(errf("DecodeKeys needs %d builders, got %d", jen.Lit(len(g.t.PK)), jen.Len(jen.Id("out")))),
		),
	}
	for j, k := range g.t.PK {
		c := g.col(k.Column)
		bt := g.kind(k.Column).builder
		body = append(body,
			jen.List(jen.Id(fmt.Sprintf("b%d", j)), jen.Id("ok"+fmt.Sprint(j))).Op(":=").Id("out").Index(jen.Lit(j)).Assert(jen.Op("*").Qual(pkgArray, bt)),
			jen.If(jen.Op("!").Id("ok"+fmt.Sprint(j))).Block(
				jen.Return(errf("column "+c.Name+": builder is %T, want *array."+bt, jen.Id("out").Index(jen.Lit(j)))),
			),
		)
	}
	appends := []jen.Code{
		jen.List(jen.Id("k"), jen.Err()).Op(":=").Id(g.id(schema.IdentDecodePK)).Call(jen.Id("keys").Dot("At").Call(jen.Id("i"))),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(errf("key %d: %w", jen.Id("i"), jen.Err()))),
	}
	for j, k := range g.t.PK {
		c := g.col(k.Column)
		b := jen.Id(fmt.Sprintf("b%d", j))
		if c.Nullable {
			appends = append(appends, jen.If(jen.Id("k").Dot(c.GoName).Dot("Valid")).Block(
				jen.Add(b).Dot("Append").Call(jen.Id("k").Dot(c.GoName).Dot("Value")),
			).Else().Block(jen.Add(b).Dot("AppendNull").Call()))
		} else {
			appends = append(appends, jen.Add(b).Dot("Append").Call(jen.Id("k").Dot(c.GoName)))
		}
	}
	body = append(body,
		jen.For(jen.List(jen.Id("i"), jen.Id("n")).Op(":=").List(jen.Lit(0), jen.Id("keys").Dot("Len").Call()), jen.Id("i").Op("<").Id("n"), jen.Id("i").Op("++")).Block(appends...),
		jen.Return(jen.Nil()),
	)
	f.Comment("DecodeKeys implements vec.Kernels.")
	recv("DecodeKeys").Params(jen.Id("keys").Op("*").Qual(pkgVec, "Bytes"), jen.Id("out").Index().Qual(pkgArray, "Builder")).Error().Block(body...)

	g.decodeValues(f, recv, errf)
	g.rowDecoder(f, recv, errf)

	f.Comment("Vnodes implements vec.Kernels.")
	recv("Vnodes").Params(chunk, jen.Id("out").Index().Uint16()).Block(
		jen.Id("v").Op(":=").Id(g.id(schema.IdentViewOf)).Call(jen.Id("c")),
		jen.Var().Id("scratch").Index(jen.Lit(64)).Byte(),
		jen.Id("buf").Op(":=").Id("scratch").Index(jen.Empty(), jen.Lit(0)),
		jen.Id("out").Op("=").Id("out").Index(jen.Empty(), jen.Id("v").Dot("NumRows").Call()),
		jen.For(jen.Id("i").Op(":=").Range().Id("out")).Block(
			jen.Id("buf").Op("=").Id("v").Dot("AppendDistKey").Call(jen.Id("buf").Index(jen.Empty(), jen.Lit(0)), jen.Id("i")),
			jen.Id("out").Index(jen.Id("i")).Op("=").Qual(pkgVec, "VnodeOf").Call(jen.Id("buf"), jen.Lit(g.t.VnodeCount)),
		),
	)

	f.Comment("Split implements vec.Kernels.")
	recv("Split").Params(chunk, jen.Id("mapping").Index().Uint16(), jen.Id("vnodes").Index().Uint16(), jen.Id("outs").Index().Qual(pkgVec, "SplitOutput")).Block(
		jen.Id(K).Values().Dot("Vnodes").Call(jen.Id("c"), jen.Id("vnodes")),
		jen.Qual(pkgVec, "SplitByDest").Call(jen.Id("c"), jen.Id("vnodes"), jen.Id("mapping"), jen.Id("outs")),
	)
}

// decodeValues emits the projected decode: check every value's frame once with
// straight-line code, then for each projected column run one typed loop over the batch
// (dispatch once per column). Fixed-width columns are decoded into a stack buffer and
// appended in bulk, so validity bits are set a word at a time. Var-width columns go
// into a *vec.VarBuilder reserved for the batch's bytes, which the frame check sums
// per column when the projection has one.
func (g *tableGen) decodeValues(f *jen.File, recv func(string) *jen.Statement, errf func(string, ...jen.Code) jen.Code) {
	l := g.layout
	const step = 256
	rowOff := jen.Id("o").Op(":=").Int().Call(jen.Id("offs").Index(jen.Id("i")))
	at := func(off int) jen.Code {
		return jen.Id("data").Index(jen.Id("o").Op("+").Lit(off), jen.Empty())
	}
	// varIdx numbers the var-width columns by slot; totalK sums the bytes of the K-th
	// over the batch, in the loop that checks the values' frames (which reads the
	// same words), so that each column reserves its bytes without a pass of its own.
	varIdx := map[int]int{}
	for k, s := range l.VarSlots {
		varIdx[s] = k
	}
	cases := []jen.Code{}
	for i, c := range g.t.Columns {
		kd := g.kind(i)
		by, bit := nullBit(i)
		isNull := jen.Id("data").Index(jen.Id("o").Op("+").Lit(by)).Op("&").Lit(bit).Op("!=").Lit(0)
		body := append(g.valueBuilder(i, func(err jen.Code) jen.Code { return jen.Return(err) }, errf),
			jen.Id("b").Dot("Reserve").Call(jen.Id("n")),
		)
		if !kd.varLen {
			slot := func(off int) jen.Code { return at(l.Slot[i] + off) }
			inner := []jen.Code{rowOff, jen.Id("tmp").Index(jen.Id("i").Op("-").Id("lo")).Op("=").Add(kd.getValue(slot))}
			var valid jen.Code = jen.Nil()
			decl := []jen.Code{jen.Var().Id("tmp").Index(jen.Lit(step)).Add(kd.goType())}
			if c.Nullable {
				decl = append(decl, jen.Var().Id("valid").Index(jen.Lit(step)).Bool())
				inner = append(inner, jen.Id("valid").Index(jen.Id("i").Op("-").Id("lo")).Op("=").Op("!").Parens(isNull))
				valid = jen.Id("valid").Index(jen.Empty(), jen.Id("hi").Op("-").Id("lo"))
			}
			body = append(body, decl...)
			body = append(body, jen.For(jen.Id("lo").Op(":=").Lit(0), jen.Id("lo").Op("<").Id("n"), jen.Id("lo").Op("+=").Lit(step)).Block(
				jen.Id("hi").Op(":=").Min(jen.Id("n"), jen.Id("lo").Op("+").Lit(step)),
				jen.For(jen.Id("i").Op(":=").Id("lo"), jen.Id("i").Op("<").Id("hi"), jen.Id("i").Op("++")).Block(inner...),
				jen.Id("b").Dot("AppendValues").Call(jen.Id("tmp").Index(jen.Empty(), jen.Id("hi").Op("-").Id("lo")), valid),
			))
		} else {
			var start jen.Code = jen.Lit(l.VarStart)
			if p := l.PrevVar[i]; p >= 0 {
				start = jen.Lit(l.VarStart).Op("+").Int().Call(le("Uint32").Call(at(p)))
			}
			end := jen.Lit(l.VarStart).Op("+").Int().Call(le("Uint32").Call(at(l.Slot[i])))
			inner := []jen.Code{rowOff}
			if c.Nullable {
				inner = append(inner, jen.If(isNull).Block(jen.Id("b").Dot("AppendNull").Call(), jen.Continue()))
			}
			inner = append(inner, jen.Id("b").Dot("UnsafeAppend").Call(jen.Id("data").Index(jen.Id("o").Op("+").Add(start), jen.Id("o").Op("+").Add(end))))
			body = append(body,
				jen.Id("b").Dot("ReserveData").Call(jen.Id(fmt.Sprintf("total%d", varIdx[l.Slot[i]]))),
				jen.For(jen.Id("i").Op(":=").Lit(0), jen.Id("i").Op("<").Id("n"), jen.Id("i").Op("++")).Block(inner...),
			)
		}
		cases = append(cases, jen.Case(jen.Lit(i)).Block(body...))
	}
	cases = append(cases, jen.Default().Block(
		jen.Return(errf("projection names column %d, the table has %d", jen.Id("col"), jen.Lit(len(g.t.Columns)))),
	))
	check := []jen.Code{
		jen.Id("v").Op(":=").Id("data").Index(jen.Id("offs").Index(jen.Id("i")), jen.Id("offs").Index(jen.Id("i").Op("+").Lit(1))),
		g.checkValue(jen.Return(errf("value %d: %w", jen.Id("i"), jen.Err()))),
	}
	var totalsDecl []jen.Code
	if len(l.VarSlots) > 0 {
		names := []jen.Code{}
		sum := []jen.Code{}
		varCols := []jen.Code{}
		for i := range g.t.Columns {
			if g.kind(i).varLen {
				varCols = append(varCols, jen.Lit(i))
			}
		}
		for k, s := range l.VarSlots {
			t := fmt.Sprintf("total%d", k)
			names = append(names, jen.Id(t))
			end := jen.Int().Call(le("Uint32").Call(jen.Id("v").Index(jen.Lit(s), jen.Empty())))
			if k == 0 {
				sum = append(sum, jen.Id(t).Op("+=").Add(end))
			} else {
				prev := jen.Int().Call(le("Uint32").Call(jen.Id("v").Index(jen.Lit(l.VarSlots[k-1]), jen.Empty())))
				sum = append(sum, jen.Id(t).Op("+=").Add(end).Op("-").Add(prev))
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
	g.valueCheck(f)
	f.Comment("DecodeValues implements vec.Kernels: one typed loop per projected column; the")
	f.Comment("columns outside the projection are never read.")
	stmts := []jen.Code{
		jen.If(jen.Len(jen.Id("out")).Op("<").Len(jen.Id("proj"))).Block(
			jen.Return(errf("DecodeValues needs %d builders, got %d", jen.Len(jen.Id("proj")), jen.Len(jen.Id("out")))),
		),
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
	recv("DecodeValues").Params(jen.Id("vals").Op("*").Qual(pkgVec, "Bytes"), jen.Id("proj").Qual(pkgVec, "Projection"), jen.Id("out").Index().Qual(pkgVec, "Builder")).Error().Block(stmts...)
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
	want := jen.Id(g.id(schema.IdentArrowSchema)).Dot("Field").Call(jen.Lit(i)).Dot("Type")
	return []jen.Code{
		jen.List(jen.Id("b"), jen.Id("ok")).Op(":=").Id("out").Index(jen.Id("j")).Assert(bt),
		jen.If(jen.Op("!").Id("ok")).Block(ret(errf("column "+c.Name+": builder is %T, want "+btName, jen.Id("out").Index(jen.Id("j"))))),
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
		jen.Len(jen.Id("v")).Op("<").Lit(l.VarStart),
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
	body := []jen.Code{}
	cond := conds[0]
	for _, c := range conds[1:] {
		cond = jen.Add(cond).Op("||").Add(c)
	}
	body = append(body, jen.If(cond).Block(jen.Return(jen.False())))
	if len(l.VarSlots) == 0 {
		body = append(body, jen.Return(jen.Len(jen.Id("v")).Op("==").Lit(l.VarStart)))
	} else {
		prev := jen.Code(nil)
		for k, s := range l.VarSlots {
			e := fmt.Sprintf("e%d", k)
			body = append(body, jen.Id(e).Op(":=").Add(le("Uint32")).Call(jen.Id("v").Index(jen.Lit(s), jen.Empty())))
			if prev != nil {
				body = append(body, jen.If(jen.Id(e).Op("<").Add(prev)).Block(jen.Return(jen.False())))
			}
			prev = jen.Id(e)
		}
		body = append(body, jen.Return(jen.Int().Call(prev).Op("==").Len(jen.Id("v")).Op("-").Lit(l.VarStart)))
	}
	f.Commentf("%s reports whether v is a well-formed row value of table %s (see vec.Layout.CheckValue).", g.id(schema.IdentValueOK), g.t.Name)
	f.Func().Id(g.id(schema.IdentValueOK)).Params(jen.Id("v").Index().Byte()).Bool().Block(body...)
}

func (g *tableGen) marker(f *jen.File) {
	M := g.id(schema.IdentMarker)
	P := g.id(schema.IdentPK)
	f.Commentf("%s marks chunks of table %s against decoded backfill positions.", M, g.t.Name)
	// With a power-of-two vnode count the per-vnode tables are arrays indexed by
	// vn & (count-1), which needs no bounds check in the row loop.
	count := g.t.VnodeCount
	pow2 := count&(count-1) == 0
	// On the typed fast path (every pk column NOT NULL and ordered by <) each vnode's
	// state folds into a threshold on the first pk column, lo0: the position's value
	// for InProgress, the type's largest value for Completed and its smallest for
	// NotStarted (the other way round for DESC). A row is then kept iff its first
	// column is below the threshold; only a row equal to it looks further.
	fast := true
	for _, k := range g.t.PK {
		if g.col(k.Column).Nullable || !g.kind(k.Column).ordered {
			fast = false
		}
	}
	first := g.t.PK[0]
	firstType := g.kind(first.Column).goType
	idx := func() jen.Code {
		if count == 1 {
			return jen.Lit(0)
		}
		if pow2 {
			return jen.Id("vn").Op("&").Lit(count - 1)
		}
		return jen.Id("vn")
	}
	var dims jen.Code = jen.Index()
	if pow2 {
		dims = jen.Index(jen.Lit(count))
	}
	fields := []jen.Code{
		jen.Id("state").Add(dims).Qual(pkgVec, "BackfillState"),
		jen.Id("pos").Add(dims).Id(P),
	}
	if fast {
		fields = append(fields, jen.Id("lo0").Add(dims).Add(firstType()))
	}
	f.Type().Id(M).Struct(fields...)
	var initTables []jen.Code
	if pow2 {
		initTables = []jen.Code{
			jen.Id("m").Op(":=").Op("&").Id(M).Values(),
			jen.Copy(jen.Id("m").Dot("state").Index(jen.Empty(), jen.Empty()), jen.Id("p").Dot("State")),
		}
	} else {
		initTables = []jen.Code{
			jen.Id("m").Op(":=").Op("&").Id(M).Values(jen.Dict{
				jen.Id("state"): jen.Append(jen.Index().Qual(pkgVec, "BackfillState").Values(), jen.Id("p").Dot("State").Op("...")),
				jen.Id("pos"):   jen.Make(jen.Index().Id(P), jen.Len(jen.Id("p").Dot("State"))),
			}),
		}
		if fast {
			initTables = append(initTables, jen.Id("m").Dot("lo0").Op("=").Make(jen.Index().Add(firstType()), jen.Len(jen.Id("p").Dot("State"))))
		}
	}
	var setLo0 []jen.Code
	if fast {
		mm := g.kind(first.Column).minMax
		top, bottom := mm[1], mm[0]
		if first.Desc {
			top, bottom = bottom, top
		}
		setLo0 = []jen.Code{jen.Switch(jen.Id("s")).Block(
			jen.Case(jen.Qual(pkgVec, "Completed")).Block(jen.Id("m").Dot("lo0").Index(jen.Id("vn")).Op("=").Add(firstType()).Call(jen.Qual(pkgMath, top))),
			jen.Case(jen.Qual(pkgVec, "NotStarted")).Block(jen.Id("m").Dot("lo0").Index(jen.Id("vn")).Op("=").Add(firstType()).Call(jen.Qual(pkgMath, bottom))),
			jen.Default().Block(jen.Id("m").Dot("lo0").Index(jen.Id("vn")).Op("=").Id("m").Dot("pos").Index(jen.Id("vn")).Dot(g.col(first.Column).GoName)),
		)}
	}
	f.Comment("NewMarker implements vec.Kernels: positions are decoded once, into typed keys.")
	g.method(f, schema.IdentKernels, "k", false, "NewMarker").Params(jen.Id("p").Op("*").Qual(pkgVec, "Positions")).Params(jen.Qual(pkgVec, "Marker"), jen.Error()).Block(
		jen.If(jen.Err().Op(":=").Qual(pkgVec, "CheckPositions").Call(jen.Id("k"), jen.Id("p")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		joinLines(initTables),
		jen.For(jen.List(jen.Id("vn"), jen.Id("s")).Op(":=").Range().Id("p").Dot("State")).Block(
			jen.Switch(jen.Id("s")).Block(
				jen.Case(jen.Qual(pkgVec, "NotStarted"), jen.Qual(pkgVec, "Completed")),
				jen.Case(jen.Qual(pkgVec, "InProgress")).Block(
					jen.List(jen.Id("pk"), jen.Err()).Op(":=").Id(g.id(schema.IdentDecodePK)).Call(jen.Id("p").Dot("Pos").Index(jen.Id("vn"))),
					jen.If(jen.Err().Op("!=").Nil()).Block(
						jen.Return(jen.Nil(), jen.Qual("fmt", "Errorf").Call(jen.Lit("table "+g.t.Name+" vnode %d: position: %w"), jen.Id("vn"), jen.Err())),
					),
					jen.Id("m").Dot("pos").Index(jen.Id("vn")).Op("=").Id("pk"),
				),
				jen.Default().Block(
					jen.Return(jen.Nil(), jen.Qual("fmt", "Errorf").Call(jen.Lit("table "+g.t.Name+" vnode %d: bad backfill state %d"), jen.Id("vn"), jen.Id("s"))),
				),
			),
			jen.Add(setLo0...),
		),
		jen.Return(jen.Id("m"), jen.Nil()),
	)

	keep := func() *jen.Statement { return jen.Id("keep").Op("=") }
	// The InProgress decision: on the typed fast path (every pk column NOT NULL and
	// ordered by <) compare the raw value slices inline, column by column, assigning
	// the outcome as a value (no data-dependent branch); otherwise call ComparePK.
	var inProgress, fastRow []jen.Code
	prelude := []jen.Code{}
	if fast {
		var chain *jen.Statement
		for j, k := range g.t.PK {
			c := g.col(k.Column)
			kv := fmt.Sprintf("k%d", j)
			prelude = append(prelude, jen.Id(kv).Op(":=").Id("v").Dot(c.GoName).Dot(g.kind(k.Column).values).Call().Index(jen.Empty(), jen.Id("n")))
			less := "<"
			if k.Desc {
				less = ">"
			}
			cond := []jen.Code{
				jen.List(jen.Id("a"), jen.Id("b")).Op(":=").List(jen.Id(kv).Index(jen.Id("i")), jen.Id("p").Dot(c.GoName)),
				jen.Id("a").Op("!=").Id("b"),
			}
			then := keep().Id("a").Op(less).Id("b")
			if chain == nil {
				chain = jen.If(cond...).Block(then)
			} else {
				chain.Else().If(cond...).Block(then)
			}
		}
		chain.Else().Block(keep().True())
		inProgress = []jen.Code{jen.Id("p").Op(":=").Op("&").Id("m").Dot("pos").Index(idx()), chain}
		// The rare path of a row equal to its vnode's threshold: the state decides, and
		// for InProgress the remaining pk columns.
		var rest *jen.Statement
		for j := 1; j < len(g.t.PK); j++ {
			k := g.t.PK[j]
			c := g.col(k.Column)
			less := "<"
			if k.Desc {
				less = ">"
			}
			cond := []jen.Code{
				jen.List(jen.Id("a"), jen.Id("b")).Op(":=").List(jen.Id(fmt.Sprintf("k%d", j)).Index(jen.Id("i")), jen.Id("p").Dot(c.GoName)),
				jen.Id("a").Op("!=").Id("b"),
			}
			then := keep().Id("a").Op(less).Id("b")
			if rest == nil {
				rest = jen.If(cond...).Block(then)
			} else {
				rest.Else().If(cond...).Block(then)
			}
		}
		var equalInProgress []jen.Code
		if rest == nil {
			equalInProgress = []jen.Code{keep().True()}
		} else {
			rest.Else().Block(keep().True())
			equalInProgress = []jen.Code{jen.Id("p").Op(":=").Op("&").Id("m").Dot("pos").Index(idx()), rest}
		}
		less := "<"
		if first.Desc {
			less = ">"
		}
		fastRow = []jen.Code{
			jen.List(jen.Id("a"), jen.Id("b")).Op(":=").List(jen.Id("k0").Index(jen.Id("i")), jen.Id("m").Dot("lo0").Index(idx())),
			jen.Id("keep").Op(":=").Id("a").Op(less).Id("b"),
			jen.If(jen.Id("a").Op("==").Id("b")).Block(
				jen.Switch(jen.Id("m").Dot("state").Index(idx())).Block(
					jen.Case(jen.Qual(pkgVec, "Completed")).Block(keep().True()),
					jen.Case(jen.Qual(pkgVec, "InProgress")).Block(equalInProgress...),
				),
			),
		}
	} else {
		inProgress = []jen.Code{keep().Id("v").Dot("ComparePK").Call(jen.Id("i"), jen.Op("&").Id("m").Dot("pos").Index(idx())).Op("<=").Lit(0)}
	}
	// Rows go in blocks of 64, one bitmap word each. Switch on the vnode state; the
	// InProgress decision is assigned as a value, with no data-dependent branch.
	loop := func(withVis bool) jen.Code {
		var body []jen.Code
		if count > 1 {
			body = append(body, jen.Id("vn").Op(":=").Id("vnodes").Index(jen.Id("i")))
		}
		if fast {
			body = append(body, fastRow...)
		} else {
			body = append(body,
				jen.Var().Id("keep").Bool(),
				jen.Switch(jen.Id("m").Dot("state").Index(idx())).Block(
					jen.Case(jen.Qual(pkgVec, "Completed")).Block(keep().True()),
					jen.Case(jen.Qual(pkgVec, "InProgress")).Block(inProgress...),
				),
			)
		}
		bit := jen.Qual(pkgVec, "Bit").Call(jen.Id("keep"))
		if withVis {
			bit = jen.Parens(jen.Add(bit).Op("&").Uint64().Call(jen.Id("vis").Index(jen.Id("i").Op(">>").Lit(3)).Op(">>").Parens(jen.Id("i").Op("&").Lit(7))).Op("&").Lit(1))
		}
		body = append(body, jen.Id("w").Op("|=").Add(bit).Op("<<").Parens(jen.Id("i").Op("-").Id("base")))
		return jen.For(jen.Id("base").Op(":=").Lit(0), jen.Id("base").Op("<").Id("n"), jen.Id("base").Op("+=").Lit(64)).Block(
			jen.Id("end").Op(":=").Min(jen.Id("base").Op("+").Lit(64), jen.Id("n")),
			jen.Var().Id("w").Uint64(),
			jen.For(jen.Id("i").Op(":=").Id("base"), jen.Id("i").Op("<").Id("end"), jen.Id("i").Op("++")).Block(body...),
			jen.If(jen.Id("end").Op("-").Id("base").Op("==").Lit(64)).Block(
				le("PutUint64").Call(jen.Id("out").Index(jen.Id("base").Op(">>").Lit(3), jen.Empty()), jen.Id("w")),
			).Else().Block(
				jen.For(jen.Id("b").Op(":=").Id("base").Op(">>").Lit(3), jen.Id("b").Op("<").Len(jen.Id("out")), jen.Id("b").Op("++")).Block(
					jen.Id("out").Index(jen.Id("b")).Op("=").Byte().Call(jen.Id("w")),
					jen.Id("w").Op(">>=").Lit(8),
				),
			),
		)
	}
	body := []jen.Code{
		jen.Id("v").Op(":=").Id(g.id(schema.IdentViewOf)).Call(jen.Id("c")),
		jen.Id("n").Op(":=").Id("v").Dot("NumRows").Call(),
		jen.Id("out").Op("=").Id("out").Index(jen.Empty(), jen.Parens(jen.Id("n").Op("+").Lit(7)).Op("/").Lit(8)),
	}
	if count > 1 {
		body = append(body, jen.Id("vnodes").Op("=").Id("vnodes").Index(jen.Empty(), jen.Id("n")))
	}
	body = append(body, prelude...)
	body = append(body,
		jen.If(jen.Id("vis").Op(":=").Id("c").Dot("Visibility").Call(), jen.Id("vis").Op("!=").Nil()).Block(
			loop(true),
		).Else().Block(loop(false)),
	)
	f.Comment("Mark implements vec.Marker with a typed compare of each row against its vnode's position.")
	g.method(f, schema.IdentMarker, "m", true, "Mark").Params(jen.Id("c").Op("*").Qual(pkgVec, "Chunk"), jen.Id("vnodes").Index().Uint16(), jen.Id("out").Index().Byte()).Block(body...)
}

// joinLines renders statements on consecutive lines as one Code.
func joinLines(stmts []jen.Code) jen.Code {
	out := jen.Add(stmts[0])
	for _, st := range stmts[1:] {
		out.Line().Add(st)
	}
	return out
}

// rowDecoder emits the table's vec.RowDecoder: Append checks a value's frame with the
// straight-line check of DecodeValues, then decodes each projected column of it at
// once (one branch per column on a loop-invariant builder pointer). Fixed-width
// values go into typed buffers that Flush appends in bulk (validity bits a word at a
// time, as DecodeValues does); var-width ones are copied straight into their
// *vec.VarBuilder, whose bytes Begin reserves from the bytes per value of the
// batches before.
func (g *tableGen) rowDecoder(f *jen.File, recv func(string) *jen.Statement, errf func(string, ...jen.Code) jen.Code) {
	l := g.layout
	D := g.id(schema.IdentRowDecoder)
	bf := func(i int) string { return fmt.Sprintf("b%d", i) }
	vf := func(i int) string { return fmt.Sprintf("v%d", i) }
	okf := func(i int) string { return fmt.Sprintf("ok%d", i) }
	perf := func(i int) string { return fmt.Sprintf("per%d", i) }
	d := func(field string) *jen.Statement { return jen.Id("d").Dot(field) }
	fields := []jen.Code{}
	for i, c := range g.t.Columns {
		kd := g.kind(i)
		if kd.varLen {
			fields = append(fields,
				jen.Id(bf(i)).Op("*").Qual(pkgVec, "VarBuilder").Comment("nil: "+c.Name+" is not projected"),
				jen.Id(perf(i)).Int().Comment("bytes per value of the last flushed rows"),
			)
			continue
		}
		fields = append(fields,
			jen.Id(bf(i)).Op("*").Qual(pkgArray, kd.builder).Comment("nil: "+c.Name+" is not projected"),
			jen.Id(vf(i)).Index().Add(kd.goType()),
		)
		if c.Nullable {
			fields = append(fields, jen.Id(okf(i)).Index().Bool())
		}
	}
	f.Commentf("%s decodes row values of table %s one at a time (vec.RowDecoder).", D, g.t.Name)
	f.Type().Id(D).Struct(fields...)
	f.Var().Id("_").Qual(pkgVec, "RowDecoders").Op("=").Id(g.id(schema.IdentKernels)).Values()

	// NewRowDecoder: the same builder checks as DecodeValues, once.
	cases := []jen.Code{}
	ret := func(err jen.Code) jen.Code { return jen.Return(jen.Nil(), err) }
	for i, c := range g.t.Columns {
		cases = append(cases, jen.Case(jen.Lit(i)).Block(append(g.valueBuilder(i, ret, errf),
			jen.If(d(bf(i)).Op("!=").Nil()).Block(ret(errf("row decoder: projection names column "+c.Name+" twice"))),
			d(bf(i)).Op("=").Id("b"),
		)...))
	}
	cases = append(cases, jen.Default().Block(
		jen.Return(jen.Nil(), errf("projection names column %d, the table has %d", jen.Id("col"), jen.Lit(len(g.t.Columns)))),
	))
	f.Comment("NewRowDecoder implements vec.RowDecoders.")
	recv("NewRowDecoder").Params(jen.Id("proj").Qual(pkgVec, "Projection"), jen.Id("out").Index().Qual(pkgVec, "Builder")).Params(jen.Qual(pkgVec, "RowDecoder"), jen.Error()).Block(
		jen.If(jen.Len(jen.Id("out")).Op("<").Len(jen.Id("proj"))).Block(
			jen.Return(jen.Nil(), errf("NewRowDecoder needs %d builders, got %d", jen.Len(jen.Id("proj")), jen.Len(jen.Id("out")))),
		),
		jen.Id("d").Op(":=").Op("&").Id(D).Values(),
		jen.For(jen.List(jen.Id("j"), jen.Id("col")).Op(":=").Range().Id("proj")).Block(jen.Switch(jen.Id("col")).Block(cases...)),
		jen.Return(jen.Id("d"), jen.Nil()),
	)

	// Begin.
	begin := []jen.Code{}
	for i, c := range g.t.Columns {
		kd := g.kind(i)
		var body []jen.Code
		if kd.varLen {
			body = []jen.Code{
				d(bf(i)).Dot("Reserve").Call(jen.Id("n")),
				d(bf(i)).Dot("ReserveData").Call(jen.Qual(pkgVec, "BatchBytes").Call(jen.Id("n"), d(perf(i)))),
			}
		} else {
			// Coloured: Append writes every column's buffer at once (vec.MakeColored).
			body = []jen.Code{jen.If(jen.Cap(d(vf(i))).Op("<").Id("n")).Block(
				d(vf(i)).Op("=").Append(jen.Qual(pkgVec, "MakeColored").Types(kd.goType()).Call(jen.Id("n")), d(vf(i)).Op("...")),
			)}
			if c.Nullable {
				body = append(body, jen.If(jen.Cap(d(okf(i))).Op("<").Id("n")).Block(
					d(okf(i)).Op("=").Append(jen.Qual(pkgVec, "MakeColored").Types(jen.Bool()).Call(jen.Id("n")), d(okf(i)).Op("...")),
				))
			}
		}
		begin = append(begin, jen.If(d(bf(i)).Op("!=").Nil()).Block(body...))
	}
	begin = append([]jen.Code{jen.Id("n").Op("=").Min(jen.Id("n"), jen.Qual(pkgVec, "MaxBatchRows"))}, begin...)
	f.Comment("Begin implements vec.RowDecoder.")
	g.method(f, schema.IdentRowDecoder, "d", true, "Begin").Params(jen.Id("n").Int()).Block(begin...)

	// Append.
	at := func(off int) jen.Code { return jen.Id("v").Index(jen.Lit(off), jen.Empty()) }
	app := []jen.Code{g.checkValue(jen.Return(errf("value: %w", jen.Err())))}
	for i, c := range g.t.Columns {
		kd := g.kind(i)
		by, bit := nullBit(i)
		isNull := jen.Id("v").Index(jen.Lit(by)).Op("&").Lit(bit).Op("!=").Lit(0)
		var body []jen.Code
		if kd.varLen {
			var start jen.Code = jen.Lit(l.VarStart)
			if p := l.PrevVar[i]; p >= 0 {
				start = jen.Lit(l.VarStart).Op("+").Int().Call(le("Uint32").Call(at(p)))
			}
			end := jen.Lit(l.VarStart).Op("+").Int().Call(le("Uint32").Call(at(l.Slot[i])))
			// VarBuilder.Append's three steps, each inlined here (Append itself is
			// too large to be).
			appendVal := []jen.Code{
				jen.Id("s").Op(":=").Id("v").Index(start, end),
				d(bf(i)).Dot("Reserve").Call(jen.Lit(1)),
				d(bf(i)).Dot("ReserveData").Call(jen.Len(jen.Id("s"))),
				d(bf(i)).Dot("UnsafeAppend").Call(jen.Id("s")),
			}
			if c.Nullable {
				body = []jen.Code{jen.If(isNull).Block(d(bf(i)).Dot("AppendNull").Call()).Else().Block(appendVal...)}
			} else {
				body = appendVal
			}
		} else {
			slot := func(off int) jen.Code { return at(l.Slot[i] + off) }
			body = []jen.Code{d(vf(i)).Op("=").Append(d(vf(i)), kd.getValue(slot))}
			if c.Nullable {
				body = append(body, d(okf(i)).Op("=").Append(d(okf(i)), jen.Op("!").Parens(isNull)))
			}
		}
		app = append(app, jen.If(d(bf(i)).Op("!=").Nil()).Block(body...))
	}
	app = append(app, jen.Return(jen.Nil()))
	f.Comment("Append implements vec.RowDecoder.")
	g.method(f, schema.IdentRowDecoder, "d", true, "Append").Params(jen.Id("v").Index().Byte()).Error().Block(app...)

	// Flush.
	flush := []jen.Code{}
	for i, c := range g.t.Columns {
		kd := g.kind(i)
		var body []jen.Code
		if kd.varLen {
			// The bytes per value of this batch size the next one's reservation.
			// Rounded up (Begin adds an eighth: vec.BatchBytes).
			body = []jen.Code{jen.If(jen.Id("n").Op(":=").Add(d(bf(i))).Dot("Len").Call(), jen.Id("n").Op(">").Lit(0)).Block(
				d(perf(i)).Op("=").Parens(d(bf(i)).Dot("DataLen").Call().Op("+").Id("n").Op("-").Lit(1)).Op("/").Id("n"),
			)}
		} else {
			var valid jen.Code = jen.Nil()
			reset := []jen.Code{d(vf(i)).Op("=").Add(d(vf(i))).Index(jen.Empty(), jen.Lit(0))}
			if c.Nullable {
				valid = d(okf(i))
				reset = append(reset, d(okf(i)).Op("=").Add(d(okf(i))).Index(jen.Empty(), jen.Lit(0)))
			}
			body = append([]jen.Code{d(bf(i)).Dot("AppendValues").Call(d(vf(i)), valid)}, reset...)
		}
		flush = append(flush, jen.If(d(bf(i)).Op("!=").Nil()).Block(body...))
	}
	flush = append(flush, jen.Return(jen.Nil()))
	f.Comment("Flush implements vec.RowDecoder.")
	g.method(f, schema.IdentRowDecoder, "d", true, "Flush").Params().Error().Block(flush...)
}

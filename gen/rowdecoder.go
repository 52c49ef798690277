package gen

import (
	"github.com/dave/jennifer/jen"
	"github.com/seed04fbb902/weir/schema"
)

// rowDecoder emits the table's vec.RowDecoder: Append checks a value's frame with the
// straight-line check of DecodeValues, then decodes each projected column of it at
// once (one branch per column on a loop-invariant builder pointer). Fixed-width
// values go into typed buffers that Flush appends in bulk (validity bits a word at a
// time, as DecodeValues does); var-width ones are copied straight into their
// *vec.VarBuilder, whose bytes Begin reserves from the bytes per value of the
// batches before.
func (g *tableGen) rowDecoder(f *jen.File, recv func(string) *jen.Statement, errf func(string, ...jen.Code) jen.Code) {
	D := g.id(schema.IdentRowDecoder)
	// Each column <C> has its builder b<C> and, when fixed-width, the buffered values
	// v<C> (and validity ok<C>), or when var-width, per<C>, the bytes per value.
	bf := func(i int) string { return "b" + g.col(i).GoName }
	vf := func(i int) string { return "v" + g.col(i).GoName }
	okf := func(i int) string { return "ok" + g.col(i).GoName }
	perf := func(i int) string { return "per" + g.col(i).GoName }
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
		cases = append(cases, jen.Case(g.colConst(i)).Block(append(g.valueBuilder(i, ret, errf),
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
	at := func(off jen.Code) jen.Code { return jen.Id("v").Index(off, jen.Empty()) }
	app := []jen.Code{
		g.layoutConsts(len(g.varCols) > 0, g.allColumns()),
		g.checkValue(jen.Return(errf("value: %w", jen.Err()))),
	}
	for i, c := range g.t.Columns {
		kd := g.kind(i)
		by, bit := nullBit(i)
		isNull := jen.Id("v").Index(jen.Lit(by)).Op("&").Lit(bit).Op("!=").Lit(0)
		var body []jen.Code
		if kd.varLen {
			start, end := g.varBounds(i, func() *jen.Statement { return nil }, at)
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
			slot := func(off int) jen.Code { return at(g.slot(i, off)) }
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

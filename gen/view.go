package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
	"github.com/seed04fbb902/weir/schema"
)

func (g *tableGen) view(f *jen.File) {
	V := g.id(schema.IdentView)
	fields := []jen.Code{jen.Id("c").Op("*").Qual(pkgVec, "Chunk")}
	for i, c := range g.t.Columns {
		fields = append(fields, jen.Id(c.GoName).Op("*").Qual(pkgArray, g.kind(i).array))
	}
	f.Commentf("%s is a typed view of a chunk of table %s: its columns as typed Arrow arrays.", V, g.t.Name)
	f.Comment("It is valid while the chunk is retained.")
	f.Type().Id(V).Struct(fields...)

	assign := []jen.Code{
		jen.Id("rec").Op(":=").Id("c").Dot("Record").Call(),
		jen.Id("v").Op(":=").Id(V).Values(jen.Dict{jen.Id("c"): jen.Id("c")}),
	}
	for i, c := range g.t.Columns {
		assign = append(assign, jen.Id("v").Dot(c.GoName).Op("=").Id("rec").Dot("Column").Call(g.colConst(i)).Assert(jen.Op("*").Qual(pkgArray, g.kind(i).array)))
	}
	assign = append(assign, jen.Return(jen.Id("v")))
	f.Commentf("%s views a chunk already known to have table %s's schema.", g.id(schema.IdentViewOf), g.t.Name)
	f.Func().Id(g.id(schema.IdentViewOf)).Params(jen.Id("c").Op("*").Qual(pkgVec, "Chunk")).Id(V).Block(assign...)

	f.Commentf("%s checks that c has table %s's schema (an error names the column) and views it.", g.id(schema.IdentNewView), g.t.Name)
	f.Func().Id(g.id(schema.IdentNewView)).Params(jen.Id("c").Op("*").Qual(pkgVec, "Chunk")).Params(jen.Id(V), jen.Error()).Block(
		jen.If(jen.Err().Op(":=").Qual(pkgVec, "CheckChunk").Call(jen.Id(g.id(schema.IdentTableVar)), jen.Id("c")), jen.Err().Op("!=").Nil()).Block(
			jen.Return(jen.Id(V).Values(), jen.Err()),
		),
		jen.Return(jen.Id(g.id(schema.IdentViewOf)).Call(jen.Id("c")), jen.Nil()),
	)

	recv := func(name string) *jen.Statement { return g.method(f, schema.IdentView, "v", true, name) }
	f.Comment("Chunk is the viewed chunk.")
	recv("Chunk").Params().Op("*").Qual(pkgVec, "Chunk").Block(jen.Return(jen.Id("v").Dot("c")))
	f.Comment("NumRows is the number of rows, visible or not.")
	recv("NumRows").Params().Int().Block(jen.Return(jen.Id("v").Dot("c").Dot("NumRows").Call()))
	f.Comment("Op is row i's op.")
	recv("Op").Params(jen.Id("i").Int()).Qual(pkgVec, "Op").Block(jen.Return(jen.Id("v").Dot("c").Dot("Ops").Call().Index(jen.Id("i"))))
	f.Comment("Visible reports whether row i is visible.")
	recv("Visible").Params(jen.Id("i").Int()).Bool().Block(jen.Return(jen.Id("v").Dot("c").Dot("Visible").Call(jen.Id("i"))))

	rowVals := jen.Dict{}
	for i, c := range g.t.Columns {
		rowVals[jen.Id(c.GoName)] = g.cellValue(i, jen.Id("i"))
	}
	f.Comment("Row returns row i.")
	recv("Row").Params(jen.Id("i").Int()).Id(g.id(schema.IdentRow)).Block(jen.Return(jen.Id(g.id(schema.IdentRow)).Values(rowVals)))

	pkVals := jen.Dict{}
	for _, k := range g.t.PK {
		pkVals[jen.Id(g.col(k.Column).GoName)] = g.cellValue(k.Column, jen.Id("i"))
	}
	f.Comment("PK returns row i's primary key.")
	recv("PK").Params(jen.Id("i").Int()).Id(g.id(schema.IdentPK)).Block(jen.Return(jen.Id(g.id(schema.IdentPK)).Values(pkVals)))

	// ComparePK: typed, column by column, honouring order and nulls; equals comparing
	// the memcomparable encodings.
	cmpBody := []jen.Code{}
	for _, k := range g.t.PK {
		c := g.col(k.Column)
		kd := g.kind(k.Column)
		sign := func(x jen.Code) jen.Code {
			if k.Desc {
				return jen.Op("-").Add(x)
			}
			return x
		}
		nullLess := -1 // the row is NULL, the position not: row sorts first iff nulls first
		if !k.NullsFirst {
			nullLess = 1
		}
		if !c.Nullable {
			cmpBody = append(cmpBody, jen.If(
				jen.Id("r").Op(":=").Add(kd.compare(jen.Id("v").Dot(c.GoName).Dot("Value").Call(jen.Id("i")), jen.Id("k").Dot(c.GoName))),
				jen.Id("r").Op("!=").Lit(0),
			).Block(jen.Return(sign(jen.Id("r")))))
			continue
		}
		cmpBody = append(cmpBody, jen.Block(
			jen.Id("an").Op(",").Id("bn").Op(":=").Id("v").Dot(c.GoName).Dot("IsNull").Call(jen.Id("i")).Op(",").Op("!").Id("k").Dot(c.GoName).Dot("Valid"),
			jen.If(jen.Id("an").Op("!=").Id("bn")).Block(
				jen.If(jen.Id("an")).Block(jen.Return(jen.Lit(nullLess))),
				jen.Return(jen.Lit(-nullLess)),
			),
			jen.If(jen.Op("!").Id("an")).Block(
				jen.If(
					jen.Id("r").Op(":=").Add(kd.compare(jen.Id("v").Dot(c.GoName).Dot("Value").Call(jen.Id("i")), jen.Id("k").Dot(c.GoName).Dot("Value"))),
					jen.Id("r").Op("!=").Lit(0),
				).Block(jen.Return(sign(jen.Id("r")))),
			),
		))
	}
	cmpBody = append(cmpBody, jen.Return(jen.Lit(0)))
	f.Comment("ComparePK compares row i's primary key with k in key order (-1, 0, +1) without")
	f.Comment("encoding the row; it agrees with bytes.Compare of the two keys' encodings.")
	recv("ComparePK").Params(jen.Id("i").Int(), jen.Id("k").Op("*").Id(g.id(schema.IdentPK))).Int().Block(cmpBody...)

	// AppendKey.
	keyBody := []jen.Code{}
	for _, k := range g.t.PK {
		keyBody = append(keyBody, g.appendKeyCol(k.Column, k.Desc, k.NullsFirst))
	}
	keyBody = append(keyBody, jen.Return(jen.Id("dst")))
	f.Comment("AppendKey appends row i's memcomparable primary key to dst.")
	recv("AppendKey").Params(jen.Id("dst").Index().Byte(), jen.Id("i").Int()).Index().Byte().Block(keyBody...)

	distBody := []jen.Code{}
	for _, d := range g.t.DistKey {
		distBody = append(distBody, g.appendKeyCol(d, false, true))
	}
	distBody = append(distBody, jen.Return(jen.Id("dst")))
	f.Comment("AppendDistKey appends the canonical encoding of row i's distribution key (see vec.VnodeOf).")
	recv("AppendDistKey").Params(jen.Id("dst").Index().Byte(), jen.Id("i").Int()).Index().Byte().Block(distBody...)

	g.appendValue(f, recv)
}

// cellValue is the value of column col at row i of view v, in the row struct's type.
func (g *tableGen) cellValue(col int, i jen.Code) jen.Code {
	c := g.col(col)
	val := jen.Id("v").Dot(c.GoName).Dot("Value").Call(i)
	if !c.Nullable {
		return val
	}
	return jen.Qual(pkgVec, "Nullable").Types(g.kind(col).goType()).Values(jen.Dict{
		jen.Id("Value"): val,
		jen.Id("Valid"): jen.Id("v").Dot(c.GoName).Dot("IsValid").Call(i),
	})
}

// appendKeyCol appends column col of row i of view v to dst as a key column.
func (g *tableGen) appendKeyCol(col int, desc, nullsFirst bool) jen.Code {
	c := g.col(col)
	kd := g.kind(col)
	enc := jen.Id("dst").Op("=").Qual(pkgVec, "AppendKey"+kd.keyFunc).Call(jen.Id("dst"), kd.toKey(jen.Id("v").Dot(c.GoName).Dot("Value").Call(jen.Id("i"))), jen.Lit(desc))
	if !c.Nullable {
		return enc
	}
	return jen.If(jen.Id("v").Dot(c.GoName).Dot("IsNull").Call(jen.Id("i"))).Block(
		jen.Id("dst").Op("=").Qual(pkgVec, "AppendKeyNull").Call(jen.Id("dst"), jen.Lit(nullsFirst)),
	).Else().Block(enc)
}

func (g *tableGen) appendValue(f *jen.File, recv func(string) *jen.Statement) {
	l := g.layout
	zero := g.id(schema.IdentValueZero)
	f.Commentf("%s is the fixed-width part of a row value of table %s, zeroed: the version", zero, g.t.Name)
	f.Comment("byte, the null bitmap and one slot per column (see vec.Layout).")
	f.Var().Id(zero).Index(jen.Lit(l.VarStart)).Byte()
	body := []jen.Code{
		g.layoutConsts(false, g.allColumns()),
		jen.Id("start").Op(":=").Len(jen.Id("dst")),
		jen.Id("dst").Op("=").Append(jen.Id("dst"), jen.Id(zero).Index(jen.Empty(), jen.Empty()).Op("...")),
		jen.Id("row").Op(":=").Id("dst").Index(jen.Id("start").Op(":")),
		jen.Id("row").Index(jen.Lit(0)).Op("=").Qual(pkgVec, "ValueVersion"),
	}
	hasVar := false
	for i, c := range g.t.Columns {
		kd := g.kind(i)
		if kd.varLen {
			hasVar = true
			continue
		}
		off := func(k int) jen.Code { return g.slot(i, k) }
		put := kd.putValue(jen.Id("row"), off, jen.Id("v").Dot(c.GoName).Dot("Value").Call(jen.Id("i")))
		if !c.Nullable {
			body = append(body, put)
			continue
		}
		by, bit := nullBit(i)
		body = append(body, jen.If(jen.Id("v").Dot(c.GoName).Dot("IsNull").Call(jen.Id("i"))).Block(
			jen.Id("row").Index(jen.Lit(by)).Op("|=").Lit(bit),
		).Else().Block(put))
	}
	if hasVar {
		body = append(body, jen.Id("end").Op(":=").Lit(0))
		for i, c := range g.t.Columns {
			if !g.kind(i).varLen {
				continue
			}
			app := []jen.Code{
				jen.Id("x").Op(":=").Id("v").Dot(c.GoName).Dot("Value").Call(jen.Id("i")),
				jen.Id("dst").Op("=").Append(jen.Id("dst"), jen.Id("x").Op("...")),
				jen.Id("end").Op("+=").Len(jen.Id("x")),
			}
			if c.Nullable {
				by, bit := nullBit(i)
				body = append(body, jen.If(jen.Id("v").Dot(c.GoName).Dot("IsNull").Call(jen.Id("i"))).Block(
					jen.Id("dst").Index(jen.Id("start").Op("+").Lit(by)).Op("|=").Lit(bit),
				).Else().Block(app...))
			} else {
				body = append(body, jen.Block(app...))
			}
			body = append(body, le("PutUint32").Call(jen.Id("dst").Index(jen.Id("start").Op("+").Add(g.slot(i, 0)), jen.Empty()), jen.Uint32().Call(jen.Id("end"))))
		}
	}
	body = append(body, jen.Return(jen.Id("dst")))
	f.Comment("AppendValue appends row i's row value (every column; see package vec) to dst.")
	recv("AppendValue").Params(jen.Id("dst").Index().Byte(), jen.Id("i").Int()).Index().Byte().Block(body...)
}

func (g *tableGen) pk(f *jen.File) {
	P := g.id(schema.IdentPK)
	fields := []jen.Code{}
	for _, k := range g.t.PK {
		c := g.col(k.Column)
		order := "asc"
		if k.Desc {
			order = "desc"
		}
		nulls := "nulls last"
		if k.NullsFirst {
			nulls = "nulls first"
		}
		fields = append(fields, jen.Id(c.GoName).Add(g.fieldType(k.Column)).Comment(fmt.Sprintf("%s %s %s", c.Name, order, nulls)))
	}
	f.Commentf("%s is a decoded primary key of table %s, in key order.", P, g.t.Name)
	f.Type().Id(P).Struct(fields...)

	enc := []jen.Code{}
	for _, k := range g.t.PK {
		c := g.col(k.Column)
		kd := g.kind(k.Column)
		val := jen.Id("k").Dot(c.GoName)
		if c.Nullable {
			val = val.Dot("Value")
		}
		e := jen.Id("dst").Op("=").Qual(pkgVec, "AppendKey"+kd.keyFunc).Call(jen.Id("dst"), kd.toKey(val), jen.Lit(k.Desc))
		if !c.Nullable {
			enc = append(enc, e)
			continue
		}
		enc = append(enc, jen.If(jen.Op("!").Id("k").Dot(c.GoName).Dot("Valid")).Block(
			jen.Id("dst").Op("=").Qual(pkgVec, "AppendKeyNull").Call(jen.Id("dst"), jen.Lit(k.NullsFirst)),
		).Else().Block(e))
	}
	enc = append(enc, jen.Return(jen.Id("dst")))
	f.Commentf("%s appends the memcomparable encoding of k to dst.", g.id(schema.IdentAppendPK))
	f.Func().Id(g.id(schema.IdentAppendPK)).Params(jen.Id("dst").Index().Byte(), jen.Id("k").Op("*").Id(P)).Index().Byte().Block(enc...)

	dec := []jen.Code{
		jen.Var().Id("k").Id(P),
		jen.Var().Id("null").Bool(),
		jen.Var().Err().Error(),
	}
	for _, kc := range g.t.PK {
		c := g.col(kc.Column)
		kd := g.kind(kc.Column)
		wrap := func() jen.Code {
			return jen.Return(jen.Id("k"), jen.Qual("fmt", "Errorf").Call(jen.Lit("column "+c.Name+": %w"), jen.Err()))
		}
		var decode jen.Code
		if kd.byteKey {
			decode = jen.Id("x").Op(",").Id("src").Op(",").Err().Op("=").Qual(pkgVec, "DecodeKeyBytes").Call(jen.Nil(), jen.Id("src"), jen.Lit(kc.Desc))
		} else {
			decode = jen.Id("x").Op(",").Id("src").Op(",").Err().Op("=").Qual(pkgVec, "DecodeKey"+kd.keyFunc).Call(jen.Id("src"), jen.Lit(kc.Desc))
		}
		var store jen.Code = jen.Id("k").Dot(c.GoName).Op("=").Add(kd.fromKey(jen.Id("x")))
		if c.Nullable {
			store = jen.Id("k").Dot(c.GoName).Op("=").Qual(pkgVec, "Some").Call(kd.fromKey(jen.Id("x")))
		}
		xType := keyGoType(kd)
		inner := []jen.Code{
			jen.Var().Id("x").Add(xType),
			decode,
			jen.If(jen.Err().Op("!=").Nil()).Block(wrap()),
			store,
		}
		dec = append(dec,
			jen.List(jen.Id("null"), jen.Id("src"), jen.Err()).Op("=").Qual(pkgVec, "DecodeKeyMarker").Call(jen.Id("src"), jen.Lit(kc.NullsFirst)),
			jen.If(jen.Err().Op("!=").Nil()).Block(wrap()),
		)
		if c.Nullable {
			dec = append(dec, jen.If(jen.Op("!").Id("null")).Block(inner...))
		} else {
			dec = append(dec,
				jen.If(jen.Id("null")).Block(jen.Return(jen.Id("k"), jen.Qual("fmt", "Errorf").Call(jen.Lit("column "+c.Name+": NULL in a NOT NULL column")))),
				jen.Block(inner...),
			)
		}
	}
	dec = append(dec,
		jen.If(jen.Len(jen.Id("src")).Op("!=").Lit(0)).Block(
			jen.Return(jen.Id("k"), jen.Qual("fmt", "Errorf").Call(jen.Lit("%d bytes left after the last pk column"), jen.Len(jen.Id("src")))),
		),
		jen.Return(jen.Id("k"), jen.Nil()),
	)
	f.Commentf("%s decodes a whole memcomparable primary key of table %s.", g.id(schema.IdentDecodePK), g.t.Name)
	f.Func().Id(g.id(schema.IdentDecodePK)).Params(jen.Id("src").Index().Byte()).Params(jen.Id(P), jen.Error()).Block(dec...)
}

// keyGoType is the type the key codec decodes a kind to.
func keyGoType(kd *kindInfo) jen.Code {
	switch kd.keyFunc {
	case "Bool":
		return jen.Bool()
	case "Int16":
		return jen.Int16()
	case "Int32":
		return jen.Int32()
	case "Int64":
		return jen.Int64()
	case "Float32":
		return jen.Float32()
	case "Float64":
		return jen.Float64()
	case "Decimal":
		return jen.Qual(pkgDecimal, "Num")
	}
	return jen.Index().Byte()
}

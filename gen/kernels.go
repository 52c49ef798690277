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

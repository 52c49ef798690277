package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
	"github.com/seed04fbb902/weir/schema"
)

// marker emits the table's vec.Marker and NewMarker: positions decoded once into
// typed keys, and a Mark that compares each row with its vnode's position.
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
		// With a one-column pk a row equal to an InProgress position is kept, as for
		// Completed.
		equal := []jen.Code{jen.Case(jen.Qual(pkgVec, "Completed"), jen.Qual(pkgVec, "InProgress")).Block(keep().True())}
		if rest != nil {
			rest.Else().Block(keep().True())
			equal = []jen.Code{
				jen.Case(jen.Qual(pkgVec, "Completed")).Block(keep().True()),
				jen.Case(jen.Qual(pkgVec, "InProgress")).Block(jen.Id("p").Op(":=").Op("&").Id("m").Dot("pos").Index(idx()), rest),
			}
		}
		less := "<"
		if first.Desc {
			less = ">"
		}
		fastRow = []jen.Code{
			jen.List(jen.Id("a"), jen.Id("b")).Op(":=").List(jen.Id("k0").Index(jen.Id("i")), jen.Id("m").Dot("lo0").Index(idx())),
			jen.Id("keep").Op(":=").Id("a").Op(less).Id("b"),
			jen.If(jen.Id("a").Op("==").Id("b")).Block(
				jen.Switch(jen.Id("m").Dot("state").Index(idx())).Block(equal...),
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

package engine

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// planCorpus is a set of valid plans that uses every node kind, including plans
// shaped like the Nexmark views of package bench (a join with a residual, aggregates
// with FILTER, an aggregate over an aggregate).
func planCorpus() map[string]Plan {
	col, as := Column, As
	keep := func(names ...string) []NamedExpr {
		out := make([]NamedExpr, len(names))
		for i, n := range names {
			out[i] = as(col(n), n)
		}
		return out
	}
	window := 10 * time.Second
	ps := map[string]Plan{
		"scan":   Scan("t"),
		"filter": Filter(Scan("t"), Call("greater", col("v"), Int(10))),
		"project": Project(Scan("t"), as(Call("multiply", col("v"), Float(2.5)), "v2"),
			as(String("x\"y\u00e9"), "c"), as(Bool(true), "b"), as(Bool(false), "f"), as(Int(-7), "i")),
		"aggregate":         Aggregate(Scan("t"), []string{"s"}, Agg("count_star", "", "n"), Agg("sum", "v", "sv")),
		"aggregate no aggs": Aggregate(Scan("t"), []string{"s", "v"}),
		"join":              Join(Scan("t"), Scan("u"), []string{"k"}, []string{"id"}, nil),
		"filter over join": Filter(Join(Project(Scan("t"), keep("k", "v")...), Scan("u"), []string{"k", "v"}, []string{"a", "b"}, nil),
			Between(col("v"), Int(1), Int(9))),
	}
	// q0
	ps["q0"] = Project(Scan("bid"), keep("auction", "bidder", "price", "date_time")...)
	// q4: a join with a residual under a nested aggregate.
	a := Project(Scan("auction"), as(col("id"), "id"), as(col("category"), "category"),
		as(col("date_time"), "a_date_time"), as(col("expires"), "expires"))
	b := Project(Scan("bid"), keep("auction", "price", "date_time")...)
	within := Between(col("date_time"), col("a_date_time"), col("expires"))
	j := Join(a, b, []string{"id"}, []string{"auction"}, &within)
	final := Aggregate(j, []string{"id", "category"}, Agg("max", "price", "final"))
	ps["q4"] = Aggregate(final, []string{"category"}, Agg("avg", "final", "avg_final"))
	// q7
	w := Aggregate(Project(Scan("bid"),
		as(TumbleStart(col("date_time"), window), "window_start"),
		as(TumbleEnd(col("date_time"), window), "window_end"),
		as(col("price"), "price")),
		[]string{"window_start", "window_end"}, Agg("max", "price", "maxprice"))
	bb := Project(Scan("bid"), keep("auction", "price", "bidder", "date_time")...)
	in := Between(col("date_time"), col("window_start"), col("window_end"))
	ps["q7"] = Project(Join(bb, w, []string{"price"}, []string{"maxprice"}, &in), keep("auction", "price", "bidder", "date_time")...)
	// q8
	p := Aggregate(Project(Scan("person"), as(col("id"), "id"), as(col("name"), "name"),
		as(TumbleStart(col("date_time"), window), "starttime"),
		as(TumbleEnd(col("date_time"), window), "endtime")),
		[]string{"id", "name", "starttime", "endtime"})
	aa := Aggregate(Project(Scan("auction"), as(col("seller"), "seller"),
		as(TumbleStart(col("date_time"), window), "a_starttime"),
		as(TumbleEnd(col("date_time"), window), "a_endtime")),
		[]string{"seller", "a_starttime", "a_endtime"})
	ps["q8"] = Project(Join(p, aa, []string{"id", "starttime", "endtime"}, []string{"seller", "a_starttime", "a_endtime"}, nil),
		keep("id", "name", "starttime")...)
	// q16: aggregates with FILTER.
	price := col("price")
	lt := func(v int64) Expr { return Call("less", price, Int(v)) }
	ge := func(v int64) Expr { return Call("greater_equal", price, Int(v)) }
	src := Project(Scan("bid"), as(col("channel"), "channel"), as(Day(col("date_time")), "day"),
		as(TimeOfDayHHMM(col("date_time")), "hhmm"), as(col("bidder"), "bidder"),
		as(lt(10_000), "r1"), as(Call("and_kleene", ge(10_000), lt(1_000_000)), "r2"), as(ge(1_000_000), "r3"))
	aggs := []AggExpr{Agg("max", "hhmm", "minute"), Agg("count_star", "", "total_bids")}
	for i, r := range []string{"r1", "r2", "r3"} {
		aggs = append(aggs, Agg("count_star", "", fmt.Sprintf("rank%d_bids", i+1)).Where(r))
		aggs = append(aggs, Agg("count_distinct", "bidder", fmt.Sprintf("rank%d_bidders", i+1)).Where(r))
	}
	ps["q16"] = Aggregate(src, []string{"channel", "day"}, aggs...)
	return ps
}

// nested is n filters over a scan: a plan n+1 nodes deep.
func nested(n int) Plan {
	var p Plan = Scan("t")
	for range n {
		p = Filter(p, Bool(true))
	}
	return p
}

func TestPlanRoundTrip(t *testing.T) {
	kinds := map[string]bool{}
	var walk func(p Plan)
	walk = func(p Plan) {
		kinds[p.kind()] = true
		for _, in := range p.inputs() {
			walk(in)
		}
	}
	ps := planCorpus()
	ps["nested 65 deep"] = nested(64)
	for name, p := range ps {
		t.Run(name, func(t *testing.T) {
			walk(p)
			data, err := marshalPlan(p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := unmarshalPlan(data)
			if err != nil {
				t.Fatalf("unmarshal %s: %v", data, err)
			}
			if !reflect.DeepEqual(got, p) {
				t.Fatalf("decoded plan differs:\n got %#v\nwant %#v\njson %s", got, p, data)
			}
			again, err := marshalPlan(got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, data) {
				t.Fatalf("re-marshal differs:\n%s\n%s", again, data)
			}
		})
	}
	for _, k := range []string{"scan", "filter", "project", "aggregate", "join"} {
		if !kinds[k] {
			t.Errorf("no %s node in the corpus", k)
		}
	}
}

func TestPlanMarshalErrors(t *testing.T) {
	for name, p := range map[string]Plan{
		"nil":                nil,
		"filter of nil":      Filter(nil, Bool(true)),
		"join with nil left": Join(nil, Scan("t"), []string{"k"}, []string{"k"}, nil),
		"aggregate of nil":   Aggregate(nil, []string{"k"}),
	} {
		if _, err := marshalPlan(p); err == nil {
			t.Errorf("%s: marshal succeeded", name)
		}
	}
}

// deepJSON is n filter nodes over a scan, as JSON.
func deepJSON(n int) string {
	s := `{"kind":"scan","scan":{"table":"t"}}`
	for range n {
		s = `{"kind":"filter","filter":{"pred":{"op":"bool","bool":true}},"inputs":[` + s + `]}`
	}
	return s
}

const scanJSON = `{"kind":"scan","scan":{"table":"t"}}`

func malformedPlans() map[string]string {
	return map[string]string{
		"empty":                    ``,
		"not json":                 `{kind: scan}`,
		"truncated":                `{"kind":"scan","scan":{"table":"t"}`,
		"null":                     `null`,
		"array":                    `[]`,
		"empty object":             `{}`,
		"number":                   `42`,
		"unknown kind":             `{"kind":"sort","scan":{"table":"t"}}`,
		"kind of wrong type":       `{"kind":7,"scan":{"table":"t"}}`,
		"scan without payload":     `{"kind":"scan"}`,
		"scan with null payload":   `{"kind":"scan","scan":null}`,
		"scan with an input":       `{"kind":"scan","scan":{"table":"t"},"inputs":[` + scanJSON + `]}`,
		"filter without payload":   `{"kind":"filter","inputs":[` + scanJSON + `]}`,
		"filter with scan payload": `{"kind":"filter","scan":{"table":"t"},"inputs":[` + scanJSON + `]}`,
		"filter without input":     `{"kind":"filter","filter":{"pred":{"op":"bool","bool":true}}}`,
		"filter with two inputs":   `{"kind":"filter","filter":{"pred":{"op":"bool"}},"inputs":[` + scanJSON + `,` + scanJSON + `]}`,
		"project without input":    `{"kind":"project","project":{"cols":[]}}`,
		"project without payload":  `{"kind":"project","inputs":[` + scanJSON + `]}`,
		"aggregate without input":  `{"kind":"aggregate","aggregate":{"group_by":["k"]}}`,
		"aggregate two inputs":     `{"kind":"aggregate","aggregate":{"group_by":["k"]},"inputs":[` + scanJSON + `,` + scanJSON + `]}`,
		"aggregate no payload":     `{"kind":"aggregate","inputs":[` + scanJSON + `]}`,
		"join with one input":      `{"kind":"join","join":{"left_keys":["k"],"right_keys":["k"]},"inputs":[` + scanJSON + `]}`,
		"join with three inputs":   `{"kind":"join","join":{"left_keys":["k"],"right_keys":["k"]},"inputs":[` + scanJSON + `,` + scanJSON + `,` + scanJSON + `]}`,
		"join without payload":     `{"kind":"join","inputs":[` + scanJSON + `,` + scanJSON + `]}`,
		"bad child":                `{"kind":"filter","filter":{"pred":{"op":"bool"}},"inputs":[{"kind":"scan"}]}`,
		"inputs not an array":      `{"kind":"filter","filter":{"pred":{"op":"bool"}},"inputs":{}}`,
		"null input":               `{"kind":"filter","filter":{"pred":{"op":"bool"}},"inputs":[null]}`,
		"group_by of wrong type":   `{"kind":"aggregate","aggregate":{"group_by":"k"},"inputs":[` + scanJSON + `]}`,
		"residual of wrong type":   `{"kind":"join","join":{"left_keys":["k"],"right_keys":["k"],"residual":1},"inputs":[` + scanJSON + `,` + scanJSON + `]}`,
		"nested 66 deep":           deepJSON(65),
		"nested 1000 deep":         deepJSON(1000),
		"nested 20000 deep":        strings.Repeat(`{"kind":"filter","inputs":[`, 20000) + strings.Repeat(`]}`, 20000),
	}
}

func TestPlanUnmarshalMalformed(t *testing.T) {
	for name, data := range malformedPlans() {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panic: %v", r)
				}
			}()
			p, err := unmarshalPlan([]byte(data))
			if err == nil {
				t.Fatalf("accepted %.200s as %#v", data, p)
			}
		})
	}
	// The limit: 65 nodes deep decodes, 66 does not.
	if _, err := unmarshalPlan([]byte(deepJSON(64))); err != nil {
		t.Errorf("a plan 65 nodes deep: %v", err)
	}
	if _, err := unmarshalPlan([]byte(deepJSON(65))); err == nil || !strings.Contains(err.Error(), "deeper than 64") {
		t.Errorf("a plan 66 nodes deep: %v", err)
	}
}

func FuzzUnmarshalPlan(f *testing.F) {
	for _, p := range planCorpus() {
		data, err := marshalPlan(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, data := range malformedPlans() {
		if len(data) < 4096 {
			f.Add([]byte(data))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := unmarshalPlan(data)
		if err != nil {
			return
		}
		out, err := marshalPlan(p)
		if err != nil {
			t.Fatalf("accepted %q but cannot marshal it: %v", data, err)
		}
		p2, err := unmarshalPlan(out)
		if err != nil {
			t.Fatalf("accepted %q; its marshalled form %s does not decode: %v", data, out, err)
		}
		if !reflect.DeepEqual(p, p2) {
			t.Fatalf("accepted %q; decoding %s gives another plan", data, out)
		}
		out2, err := marshalPlan(p2)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("accepted %q; re-marshal is not stable: %s vs %s (%v)", data, out, out2, err)
		}
		if _, err := scansOf(p); err != nil && !strings.Contains(err.Error(), "no scan") {
			t.Fatalf("accepted %q; scansOf: %v", data, err)
		}
	})
}

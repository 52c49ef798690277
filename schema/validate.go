package schema

import (
	"fmt"
	"slices"
	"strconv"
)

// spec is a pk or distribution key entry as written, before it is resolved.
type spec struct {
	text string
	line int
}

// parse-time state kept on a Table; empty for tables built in code.
type parseState struct {
	field     string
	lines     map[string]int
	pkSpecs   []spec
	distSpecs []spec
	distGiven bool
}

func (t *Table) lineOf(key string) int {
	if t.lines == nil {
		return 0
	}
	if l, ok := t.lines[key]; ok && l > 0 {
		return l
	}
	return t.lines[""]
}

// validate resolves the key specs of a parsed table (or checks the indexes of one built
// in code), fills derived fields and adds every problem to errs.
func (t *Table) validate(errs *ErrorList, _ map[string]int) {
	file := t.File
	field := t.field
	if field == "" {
		field = t.Name
	}
	add := func(key, sub, format string, args ...any) {
		errs.add(file, t.lineOf(key), join(field, sub), format, args...)
	}
	if t.Name == "" {
		add("", "name", "missing: every table has a name")
	} else if g, err := GoName(t.Name); err != nil {
		add("name", "name", "%v", err)
	} else {
		t.GoName = g
	}
	if len(t.Columns) == 0 {
		add("", "columns", "a table has at least one column")
	}
	byName := map[string]int{}
	byGo := map[string]string{}
	for i := range t.Columns {
		c := &t.Columns[i]
		key := "columns." + strconv.Itoa(i)
		sub := "columns." + c.Name
		if c.Name == "" {
			add(key, fmt.Sprintf("columns[%d].name", i), "missing: every column has a name")
			continue
		}
		if _, dup := byName[c.Name]; dup {
			add(key, sub, "duplicate column %q", c.Name)
			continue
		}
		byName[c.Name] = i
		if t.lines != nil {
			// The parser has reported a bad type already.
		} else if c.Type.Kind == Invalid || c.Type.Kind > Timestamptz {
			add(key, sub+".type", "missing or invalid type")
		} else if c.Type.Kind == Decimal && (c.Type.Precision < 1 || c.Type.Precision > MaxDecimalPrecision || c.Type.Scale < 0 || c.Type.Scale > c.Type.Precision) {
			add(key, sub+".type", "bad decimal(%d,%d)", c.Type.Precision, c.Type.Scale)
		}
		g, err := columnGoName(c.Name)
		if err != nil {
			add(key, sub+".name", "%v", err)
			continue
		}
		if other, ok := byGo[g]; ok {
			add(key, sub+".name", "maps to Go name %s, as column %q does%s", g, other, renamedWhy(g, c.Name, other))
			continue
		}
		byGo[g] = c.Name
		c.GoName = g
	}

	// Primary key.
	if t.pkSpecs != nil || t.lines != nil {
		t.PK = t.PK[:0]
		for i, s := range t.pkSpecs {
			sub := fmt.Sprintf("primary_key[%d]", i)
			name, desc, nf, err := ParseKeySpec(s.text)
			if err != nil {
				errs.add(file, s.line, join(field, sub), "%v", err)
				continue
			}
			idx, ok := byName[name]
			if !ok {
				errs.add(file, s.line, join(field, sub), "unknown column %q", name)
				continue
			}
			t.PK = append(t.PK, KeyColumn{Column: idx, Desc: desc, NullsFirst: nf})
		}
		if len(t.pkSpecs) == 0 {
			add("primary_key", "primary_key", "missing: every table has a primary key of at least one column")
		}
	} else if len(t.PK) == 0 {
		add("", "primary_key", "missing: every table has a primary key of at least one column")
	}
	inPK := map[int]bool{}
	for i, k := range t.PK {
		if k.Column < 0 || k.Column >= len(t.Columns) {
			add("primary_key", fmt.Sprintf("primary_key[%d]", i), "column index %d out of range", k.Column)
			continue
		}
		if inPK[k.Column] {
			add("primary_key", fmt.Sprintf("primary_key[%d]", i), "column %q appears twice", t.Columns[k.Column].Name)
		}
		inPK[k.Column] = true
	}

	// Distribution key.
	if t.distGiven {
		t.DistKey = t.DistKey[:0]
		for i, s := range t.distSpecs {
			sub := fmt.Sprintf("distribution_key[%d]", i)
			idx, ok := byName[s.text]
			if !ok {
				errs.add(file, s.line, join(field, sub), "unknown column %q", s.text)
				continue
			}
			t.DistKey = append(t.DistKey, idx)
		}
		if len(t.distSpecs) == 0 {
			add("distribution_key", "distribution_key", "empty: leave it out to distribute by the whole primary key")
		}
	} else if len(t.DistKey) == 0 {
		// The whole pk, each column once (a pk column given twice is reported above).
		for _, k := range t.PK {
			if !slices.Contains(t.DistKey, k.Column) {
				t.DistKey = append(t.DistKey, k.Column)
			}
		}
	}
	seenDist := map[int]bool{}
	for i, d := range t.DistKey {
		sub := fmt.Sprintf("distribution_key[%d]", i)
		if d < 0 || d >= len(t.Columns) {
			add("distribution_key", sub, "column index %d out of range", d)
			continue
		}
		if !inPK[d] {
			add("distribution_key", sub, "column %q is not in the primary key: the distribution key is a subset of the pk", t.Columns[d].Name)
		}
		if seenDist[d] {
			add("distribution_key", sub, "column %q appears twice", t.Columns[d].Name)
		}
		seenDist[d] = true
	}

	// Vnode count: 0 means not given (default), unless the schema file gave it.
	switch {
	case t.VnodeCount == 0 && t.lines == nil:
		t.VnodeCount = DefaultVnodeCount
	case t.VnodeCount == 0:
		if _, given := t.lines["vnodes"]; given {
			add("vnodes", "vnodes", "vnode count 0 out of range 1..%d", MaxVnodeCount)
		} else {
			t.VnodeCount = DefaultVnodeCount
		}
	case t.VnodeCount < 1 || t.VnodeCount > MaxVnodeCount:
		add("vnodes", "vnodes", "vnode count %d out of range 1..%d", t.VnodeCount, MaxVnodeCount)
	}
}

// renamedWhy explains a Go name clash that the Col suffix of a reserved name made.
func renamedWhy(g string, names ...string) string {
	for _, n := range names {
		if raw, err := GoName(n); err == nil && raw != g {
			return fmt.Sprintf(" (%s is a method of a generated type, so column %q gets %s)", raw, n, g)
		}
	}
	return ""
}

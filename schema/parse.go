package schema

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// File is a parsed schema file: one or more tables.
type File struct {
	Path   string
	Tables []*Table
}

// Table returns the table with the given name.
func (f *File) Table(name string) (*Table, bool) {
	for _, t := range f.Tables {
		if t.Name == name {
			return t, true
		}
	}
	return nil, false
}

// ParseFile reads and parses a schema file.
func ParseFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a schema file's contents. The name is used in errors only. On any
// problem it returns an ErrorList naming file, line and field of each, and no tables.
//
// The format:
//
//	tables:
//	  - name: bid
//	    columns:
//	      - {name: auction, type: int64}
//	      - {name: channel, type: varchar, nullable: true}
//	      - {name: price, type: "decimal(12,2)"}
//	    primary_key: [auction, "date_time desc nulls first"]
//	    distribution_key: [auction]   # optional: a subset of the pk; default the whole pk
//	    vnodes: 256                   # optional: 1 to 32768; default 256
//
// A pk entry is a column name, optionally followed by ASC or DESC and by NULLS FIRST or
// NULLS LAST (default ASC; nulls last for ASC, first for DESC, as in PostgreSQL).
func Parse(name string, data []byte) (*File, error) {
	p := &fileParser{file: name}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		line := 0
		var te interface{ GetToken() *token.Token }
		if errors.As(err, &te) && te.GetToken() != nil {
			line = te.GetToken().Position.Line
		}
		msg := err.Error()
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		p.errs.add(name, line, "", "YAML syntax: %s", msg)
		return nil, p.errs
	}
	out := &File{Path: name}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		p.errs.add(name, 1, "", "want one YAML document with a top-level key \"tables\"")
		return nil, p.errs
	}
	top, ok := p.mapping(f.Docs[0].Body, "")
	if !ok {
		return nil, p.errs
	}
	var tablesNode ast.Node
	for _, kv := range top {
		if kv.key != "tables" {
			p.errs.add(name, kv.line, kv.key, "unknown key (want \"tables\")")
			continue
		}
		tablesNode = kv.value
	}
	if tablesNode == nil {
		if len(p.errs) == 0 {
			p.errs.add(name, line(f.Docs[0].Body), "tables", "missing: a schema file declares at least one table")
		}
		return nil, p.errs
	}
	items, ok := p.sequence(tablesNode, "tables")
	if ok && len(items) == 0 {
		p.errs.add(name, line(tablesNode), "tables", "empty: a schema file declares at least one table")
	}
	for i, item := range items {
		if t := p.table(item, i); t != nil {
			out.Tables = append(out.Tables, t)
		}
	}
	p.checkFile(out)
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	return out, nil
}

type fileParser struct {
	file string
	errs ErrorList
}

type keyValue struct {
	key   string
	line  int
	value ast.Node
}

func line(n ast.Node) int {
	if n == nil || n.GetToken() == nil {
		return 0
	}
	return n.GetToken().Position.Line
}

func (p *fileParser) mapping(n ast.Node, field string) ([]keyValue, bool) {
	var values []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		values = m.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{m}
	default:
		p.errs.add(p.file, line(n), field, "want a mapping, found %s", n.Type())
		return nil, false
	}
	seen := map[string]bool{}
	out := make([]keyValue, 0, len(values))
	for _, v := range values {
		k := v.Key.String()
		if seen[k] {
			p.errs.add(p.file, line(v.Key), join(field, k), "duplicate key")
			continue
		}
		seen[k] = true
		out = append(out, keyValue{key: k, line: line(v.Key), value: v.Value})
	}
	return out, true
}

func (p *fileParser) sequence(n ast.Node, field string) ([]ast.Node, bool) {
	s, ok := n.(*ast.SequenceNode)
	if !ok {
		p.errs.add(p.file, line(n), field, "want a list, found %s", n.Type())
		return nil, false
	}
	return s.Values, true
}

func (p *fileParser) scalar(n ast.Node, field string) (string, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
		return v.String(), true
	}
	p.errs.add(p.file, line(n), field, "want a single value, found %s", n.Type())
	return "", false
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func (p *fileParser) table(n ast.Node, idx int) *Table {
	field := fmt.Sprintf("tables[%d]", idx)
	kvs, ok := p.mapping(n, field)
	if !ok {
		return nil
	}
	t := &Table{File: p.file, Line: line(n)}
	t.lines = map[string]int{"": line(n)}
	var pkNode, distNode, colsNode ast.Node
	for _, kv := range kvs {
		if kv.key == "name" {
			t.Name, _ = p.scalar(kv.value, field+".name")
			t.lines["name"] = line(kv.value)
		}
	}
	if t.Name != "" {
		field = t.Name
	}
	t.field = field
	nerr := len(p.errs)
	for _, kv := range kvs {
		switch kv.key {
		case "name":
		case "columns":
			colsNode = kv.value
		case "primary_key":
			pkNode = kv.value
			t.lines["primary_key"] = line(kv.value)
		case "distribution_key":
			distNode = kv.value
			t.lines["distribution_key"] = line(kv.value)
		case "vnodes":
			s, ok := p.scalar(kv.value, field+".vnodes")
			if !ok {
				continue
			}
			v, err := strconv.Atoi(s)
			if err != nil {
				p.errs.add(p.file, line(kv.value), field+".vnodes", "want a whole number from 1 to %d, found %q", MaxVnodeCount, s)
				continue
			}
			// validate tells an explicit 0 from "not given" by this line entry.
			t.lines["vnodes"] = line(kv.value)
			t.VnodeCount = v
		default:
			p.errs.add(p.file, kv.line, join(field, kv.key), "unknown key (want name, columns, primary_key, distribution_key, vnodes)")
		}
	}
	if colsNode == nil {
		p.errs.add(p.file, t.Line, field+".columns", "missing: a table has at least one column")
	} else if items, ok := p.sequence(colsNode, field+".columns"); ok {
		for i, item := range items {
			p.column(t, item, i)
		}
	}
	if pkNode != nil {
		if items, ok := p.sequence(pkNode, field+".primary_key"); ok {
			for i, item := range items {
				s, ok := p.scalar(item, fmt.Sprintf("%s.primary_key[%d]", field, i))
				if !ok {
					continue
				}
				t.pkSpecs = append(t.pkSpecs, spec{text: s, line: line(item)})
			}
		}
	}
	if distNode != nil {
		t.distGiven = true
		if items, ok := p.sequence(distNode, field+".distribution_key"); ok {
			for i, item := range items {
				s, ok := p.scalar(item, fmt.Sprintf("%s.distribution_key[%d]", field, i))
				if !ok {
					continue
				}
				t.distSpecs = append(t.distSpecs, spec{text: s, line: line(item)})
			}
		}
	}
	t.validate(&p.errs, t.lines)
	if len(p.errs) > nerr {
		return nil
	}
	return t
}

func (p *fileParser) column(t *Table, n ast.Node, idx int) {
	field := fmt.Sprintf("%s.columns[%d]", t.field, idx)
	kvs, ok := p.mapping(n, field)
	if !ok {
		return
	}
	var c Column
	var typeText string
	typeLine := line(n)
	for _, kv := range kvs {
		if kv.key == "name" {
			c.Name, _ = p.scalar(kv.value, field+".name")
		}
	}
	if c.Name != "" {
		field = t.field + ".columns." + c.Name
	}
	for _, kv := range kvs {
		switch kv.key {
		case "name":
		case "type":
			typeText, _ = p.scalar(kv.value, field+".type")
			typeLine = line(kv.value)
		case "nullable":
			s, ok := p.scalar(kv.value, field+".nullable")
			if !ok {
				continue
			}
			switch strings.ToLower(s) {
			case "true":
				c.Nullable = true
			case "false":
			default:
				p.errs.add(p.file, line(kv.value), field+".nullable", "want true or false, found %q", s)
			}
		default:
			p.errs.add(p.file, kv.line, join(field, kv.key), "unknown key (want name, type, nullable)")
		}
	}
	// A missing name is reported by validate.
	if typeText == "" {
		p.errs.add(p.file, line(n), field+".type", "missing: every column has a type")
	} else if ty, err := ParseType(typeText); err != nil {
		p.errs.add(p.file, typeLine, field+".type", "%v", err)
	} else {
		c.Type = ty
	}
	t.lines["columns."+strconv.Itoa(len(t.Columns))] = line(n)
	t.Columns = append(t.Columns, c)
}

var decimalRE = regexp.MustCompile(`^decimal\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)$`)

var typeAliases = map[string]Kind{
	"boolean": Boolean, "bool": Boolean,
	"int16": Int16, "smallint": Int16,
	"int32": Int32, "int": Int32, "integer": Int32,
	"int64": Int64, "bigint": Int64,
	"float32": Float32, "real": Float32,
	"float64": Float64, "double": Float64,
	"varchar": Varchar, "text": Varchar,
	"bytea":       Bytea,
	"date":        Date,
	"timestamp":   Timestamp,
	"timestamptz": Timestamptz,
}

// ParseType parses a type name: boolean, int16, int32, int64, float32, float64,
// decimal(p,s), varchar, bytea, date, timestamp, timestamptz (and the SQL spellings
// bool, smallint, int, integer, bigint, real, double, text).
func ParseType(s string) (Type, error) {
	low := strings.ToLower(strings.TrimSpace(s))
	if k, ok := typeAliases[low]; ok {
		return Type{Kind: k}, nil
	}
	if m := decimalRE.FindStringSubmatch(low); m != nil {
		p, _ := strconv.Atoi(m[1])
		sc := 0
		if m[2] != "" {
			sc, _ = strconv.Atoi(m[2])
		}
		if p < 1 || p > MaxDecimalPrecision {
			return Type{}, fmt.Errorf("decimal precision %d out of range 1..%d", p, MaxDecimalPrecision)
		}
		if sc > p {
			return Type{}, fmt.Errorf("decimal scale %d larger than precision %d", sc, p)
		}
		return Type{Kind: Decimal, Precision: int32(p), Scale: int32(sc)}, nil
	}
	if strings.HasPrefix(low, "decimal") {
		return Type{}, fmt.Errorf("bad decimal type %q: want decimal(p,s) with 1 <= p <= %d and 0 <= s <= p", s, MaxDecimalPrecision)
	}
	names := make([]string, 0, len(Kinds))
	for _, k := range Kinds {
		if k == Decimal {
			names = append(names, "decimal(p,s)")
			continue
		}
		names = append(names, k.String())
	}
	return Type{}, fmt.Errorf("unknown type %q (want one of %s)", s, strings.Join(names, ", "))
}

// ParseKeySpec parses a pk entry: "col", "col desc", "col asc nulls first", ...
func ParseKeySpec(s string) (column string, desc, nullsFirst bool, err error) {
	words := strings.Fields(s)
	if len(words) == 0 {
		return "", false, false, fmt.Errorf("empty key column")
	}
	column = words[0]
	rest := words[1:]
	nullsSet := false
	if len(rest) > 0 {
		switch strings.ToLower(rest[0]) {
		case "asc":
			rest = rest[1:]
		case "desc":
			desc = true
			rest = rest[1:]
		}
	}
	nullsFirst = desc
	if len(rest) == 2 && strings.EqualFold(rest[0], "nulls") {
		switch strings.ToLower(rest[1]) {
		case "first":
			nullsFirst, nullsSet = true, true
		case "last":
			nullsFirst, nullsSet = false, true
		}
	}
	if len(rest) != 0 && !nullsSet {
		return "", false, false, fmt.Errorf("bad key column %q: want \"name [asc|desc] [nulls first|nulls last]\"", s)
	}
	return column, desc, nullsFirst, nil
}

// checkFile checks what spans tables: unique table names, and no clash between the Go
// identifiers generated for them (checkNames).
func (p *fileParser) checkFile(f *File) {
	seen := map[string]bool{}
	unique := make([]*Table, 0, len(f.Tables))
	for _, t := range f.Tables {
		if seen[t.Name] {
			p.errs.add(p.file, t.lineOf("name"), t.Name+".name", "duplicate table %q", t.Name)
			continue
		}
		seen[t.Name] = true
		unique = append(unique, t)
	}
	checkNames(p.file, unique, &p.errs)
	sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
}

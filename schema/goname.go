package schema

import (
	"fmt"
	"strings"
	"unicode"
)

// initialisms are name parts written in capitals in Go (Effective Go's MixedCaps with
// the usual initialisms), so that "id" becomes ID and "url" becomes URL.
var initialisms = map[string]string{
	"id": "ID", "url": "URL", "uri": "URI", "ip": "IP", "http": "HTTP", "json": "JSON",
	"sql": "SQL", "uuid": "UUID", "api": "API", "utc": "UTC", "pk": "PK", "ts": "TS",
}

// GoName maps a schema name (a table or column) to an exported Go identifier: the name
// is split at underscores and at lower-to-upper case changes, each part is capitalised
// (initialisms in capitals), and the parts are joined. "date_time" becomes DateTime,
// "type" becomes Type, "Extra" stays Extra, "auction_id" becomes AuctionID. Names must
// start with a letter or underscore and hold only letters, digits and underscores.
//
// A column whose Go name is a method of a generated type that holds the columns as
// fields (ReservedColumnNames, derived from the table of generated identifiers in
// generated.go) gets the suffix "Col", as often as needed: "op" becomes OpCol and "pk"
// PKCol. Two columns of a table that end up with one Go name ("date_time" and
// "DateTime", or "op" and "op_col") are refused, as are tables whose generated
// identifiers collide (see File.CheckNames).
func GoName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("empty name")
	}
	for i, r := range name {
		switch {
		case r == '_' || (r < unicode.MaxASCII && unicode.IsLetter(r)):
		case r < unicode.MaxASCII && unicode.IsDigit(r):
			if i == 0 {
				return "", fmt.Errorf("name %q starts with a digit", name)
			}
		default:
			return "", fmt.Errorf("name %q holds %q: only ASCII letters, digits and underscores are allowed", name, r)
		}
	}
	var b strings.Builder
	for _, part := range splitName(name) {
		if up, ok := initialisms[strings.ToLower(part)]; ok {
			b.WriteString(up)
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]))
		b.WriteString(part[1:])
	}
	out := b.String()
	if out == "" {
		return "", fmt.Errorf("name %q has no letters or digits to make a Go identifier from", name)
	}
	if out[0] >= '0' && out[0] <= '9' {
		return "", fmt.Errorf("name %q maps to %q, which starts with a digit", name, out)
	}
	return out, nil
}

func splitName(name string) []string {
	var parts []string
	for _, p := range strings.Split(name, "_") {
		start := 0
		for i := 1; i < len(p); i++ {
			if unicode.IsLower(rune(p[i-1])) && unicode.IsUpper(rune(p[i])) {
				parts = append(parts, p[start:i])
				start = i
			}
		}
		if start < len(p) {
			parts = append(parts, p[start:])
		}
	}
	return parts
}

func columnGoName(name string) (string, error) {
	g, err := GoName(name)
	if err != nil {
		return "", err
	}
	for reservedColumnNames[g] {
		g += "Col"
	}
	return g, nil
}

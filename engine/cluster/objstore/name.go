package objstore

import (
	"fmt"
	"strconv"
	"strings"
)

// Name identifies one uploaded sstable: the k-th of the epoch that incarnation
// Incarnation of node Node exported, or with Base the k-th of the base (the whole
// committed state) at that epoch it exported. Two uploads never share a name: a node
// restarted or replaced runs as a new incarnation.
type Name struct {
	Epoch       uint64
	Node        uint64
	Incarnation uint64
	K           uint64
	Base        bool
}

// String is the object's name in the bucket: e<epoch>-n<node>-i<incarnation>-<k>.sst,
// each number in decimal, or b<epoch>-... for a base's.
func (n Name) String() string {
	p := 'e'
	if n.Base {
		p = 'b'
	}
	return fmt.Sprintf("%c%d-n%d-i%d-%d.sst", p, n.Epoch, n.Node, n.Incarnation, n.K)
}

// ParseName parses an object name that String formats. Anything else (another
// prefix or suffix, a missing or extra field, a sign, a leading zero, a number out of
// uint64's range) is an error naming the object.
func ParseName(s string) (Name, error) {
	bad := func(why string) (Name, error) {
		return Name{}, fmt.Errorf("objstore: object %q is not named e<epoch>-n<node>-i<incarnation>-<k>.sst (or b<epoch>-...): %s", s, why)
	}
	rest, ok := strings.CutSuffix(s, ".sst")
	if !ok {
		return bad("no .sst suffix")
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 4 {
		return bad(fmt.Sprintf("%d fields, want 4", len(parts)))
	}
	var n Name
	if strings.HasPrefix(parts[0], "b") {
		n.Base = true
		parts[0] = "e" + parts[0][1:]
	}
	fields := []struct {
		prefix string
		what   string
		dst    *uint64
	}{{"e", "epoch", &n.Epoch}, {"n", "node", &n.Node}, {"i", "incarnation", &n.Incarnation}, {"", "k", &n.K}}
	for i, f := range fields {
		digits, ok := strings.CutPrefix(parts[i], f.prefix)
		if !ok {
			return bad(fmt.Sprintf("the %s field does not start with %q", f.what, f.prefix))
		}
		v, err := parseDecimal(digits)
		if err != nil {
			return bad(fmt.Sprintf("%s %q: %v", f.what, digits, err))
		}
		*f.dst = v
	}
	return n, nil
}

// parseDecimal parses a canonical decimal uint64: digits only, no leading zero.
func parseDecimal(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("not a decimal number")
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("leading zero")
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("out of range")
	}
	return v, nil
}

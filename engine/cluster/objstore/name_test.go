package objstore_test

import (
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/engine/cluster/objstore"
)

func TestNameRoundTrip(t *testing.T) {
	for _, n := range []objstore.Name{
		{},
		{Epoch: 111550435238838272, Node: 3, Incarnation: 17, K: 2},
		{Epoch: 1<<64 - 1, Node: 1<<64 - 1, Incarnation: 1<<64 - 1, K: 1<<64 - 1},
		{Epoch: 9, Node: 2, Incarnation: 4, K: 1, Base: true},
	} {
		s := n.String()
		got, err := objstore.ParseName(s)
		if err != nil {
			t.Fatalf("ParseName(%q): %v", s, err)
		}
		if got != n {
			t.Fatalf("ParseName(%q) = %+v, want %+v", s, got, n)
		}
	}
	if s := (objstore.Name{Epoch: 5, Node: 1, Incarnation: 2, K: 3}).String(); s != "e5-n1-i2-3.sst" {
		t.Fatalf("String = %q", s)
	}
	if s := (objstore.Name{Epoch: 5, Node: 1, Incarnation: 2, K: 3, Base: true}).String(); s != "b5-n1-i2-3.sst" {
		t.Fatalf("String of a base's = %q", s)
	}
}

func TestParseNameRefusesMalformed(t *testing.T) {
	for _, c := range []struct{ name, why string }{
		{"", "no .sst suffix"},
		{"e5-n1-i2-3", "no .sst suffix"},
		{"e5-n1-i2-3.sst.attrs", "no .sst suffix"},
		{"e5-n1-i2.sst", "3 fields"},
		{"e5-n1-i2-3-4.sst", "5 fields"},
		{"x5-n1-i2-3.sst", `epoch field does not start with "e"`},
		{"e5-m1-i2-3.sst", `node field does not start with "n"`},
		{"e5-n1-j2-3.sst", `incarnation field does not start with "i"`},
		{"e-n1-i2-3.sst", `epoch "": empty`},
		{"e05-n1-i2-3.sst", "leading zero"},
		{"e5-n+1-i2-3.sst", "not a decimal number"},
		{"e5-n1-i2-k3.sst", "not a decimal number"},
		{"e5-n1-i2- 3.sst", "not a decimal number"},
		{"e18446744073709551616-n1-i2-3.sst", "out of range"},
		{"dir/e5-n1-i2-3.sst", `epoch field does not start with "e"`},
		{"e5-n1-i2-.sst", `k "": empty`},
		{"b-n1-i2-3.sst", `epoch "": empty`},
		{"bb5-n1-i2-3.sst", "not a decimal number"},
	} {
		_, err := objstore.ParseName(c.name)
		if err == nil {
			t.Fatalf("ParseName(%q) was accepted", c.name)
		}
		if !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), c.name) {
			t.Fatalf("ParseName(%q) = %v, want an error naming it with %q", c.name, err, c.why)
		}
	}
}

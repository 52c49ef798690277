package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestSchemasJSON(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"schemas", "--json"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var sums []tableSummary
	if err := json.Unmarshal(out.Bytes(), &sums); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if len(sums) != 3 {
		t.Fatalf("%d tables", len(sums))
	}
	for _, s := range sums {
		if !s.Generated {
			t.Errorf("table %s: generated kernels not registered", s.Table)
		}
	}
	if sums[2].Table != "bid" || len(sums[2].Columns) != 7 {
		t.Errorf("bid summary %+v", sums[2])
	}
}

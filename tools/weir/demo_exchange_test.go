package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The demo with every edge between nodes an Arrow Flight stream and every report a
// control stream's frame: every view verified through the rescales, pauses and the
// crash, and the streams were opened.
func TestDemoExchangeFlight(t *testing.T) {
	root := newRoot()
	var out, errw bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errw)
	root.SetArgs([]string{"demo", "--json", "--events", "10000", "--rate", "500", "--progress", "none", "--exchange", "flight", "--control", "grpc"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errw.String())
	}
	var r demoResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if len(r.MVs) != 5 || r.Recoveries < 1 || r.Exchange != "flight" || r.ExchangeEdges == 0 || r.Control != "grpc" {
		t.Fatalf("result %s", out.String())
	}
	for _, mv := range r.MVs {
		if !mv.Verified || mv.Rows == 0 {
			t.Errorf("view %+v", mv)
		}
	}
}

func TestDemoExchangeUnknown(t *testing.T) {
	root := newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"demo", "--exchange", "pigeon"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), `--exchange "pigeon", want channel or flight`) {
		t.Fatalf("got %v", err)
	}
}

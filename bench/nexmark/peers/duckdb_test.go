//go:build duckdb

package peers

import (
	"context"
	"testing"
)

// TestDuckDB checks DuckDB's results (in-memory database) against the oracle.
func TestDuckDB(t *testing.T) {
	p, err := OpenDuckDB(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	if p.Name() != "duckdb" {
		t.Errorf("Name() = %q", p.Name())
	}
	checkPeer(t, p)
}

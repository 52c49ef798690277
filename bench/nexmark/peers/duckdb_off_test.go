//go:build !duckdb

package peers

import (
	"context"
	"strings"
	"testing"
)

func TestDuckDBNotBuilt(t *testing.T) {
	_, err := OpenDuckDB(context.Background(), "")
	if err == nil || !strings.Contains(err.Error(), "-tags duckdb") {
		t.Fatalf("OpenDuckDB without the duckdb tag: %v", err)
	}
	t.Skip("DuckDB is not compiled in; run the DuckDB peer test with `go test -tags duckdb ./bench/nexmark/peers/`")
}

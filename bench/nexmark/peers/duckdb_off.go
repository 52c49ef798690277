//go:build !duckdb

package peers

import (
	"context"
	"errors"
)

// OpenDuckDB is only available in builds with the duckdb tag (DuckDB is a cgo
// dependency Weir does not build by default).
func OpenDuckDB(ctx context.Context, path string) (Peer, error) {
	return nil, errors.New("peers: DuckDB support is not compiled in; build with -tags duckdb (cgo; the first build takes minutes)")
}

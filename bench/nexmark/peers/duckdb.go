//go:build duckdb

package peers

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/seed04fbb902/weir/bench/nexmark/queries"
)

// duckDB is the DuckDB peer: one connection to an in-process database.
type duckDB struct {
	connector *duckdb.Connector
	db        *sql.DB
	conn      *sql.Conn
}

// OpenDuckDB opens the DuckDB database at path ("" for an in-memory one) in process and
// sets its time zone to UTC.
func OpenDuckDB(ctx context.Context, path string) (Peer, error) {
	connector, err := duckdb.NewConnector(path, nil)
	if err != nil {
		return nil, fmt.Errorf("peers: open duckdb %q: %w", path, err)
	}
	db := sql.OpenDB(connector)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		connector.Close()
		return nil, fmt.Errorf("peers: duckdb: %w", err)
	}
	d := &duckDB{connector: connector, db: db, conn: conn}
	// Timestamps are stored without a time zone, so the setting only matters to
	// functions that convert; it keeps them in UTC like the PostgreSQL peer. (Without
	// the ICU extension there is no TimeZone setting; that is fine.)
	_, _ = conn.ExecContext(ctx, "SET TimeZone = 'UTC'")
	return d, nil
}

func (d *duckDB) Name() string { return "duckdb" }

func (d *duckDB) Close() error {
	return errors.Join(d.conn.Close(), d.db.Close(), d.connector.Close())
}

// Load drops and creates the tables with their primary keys, appends the rows with the
// Appender, then ANALYZE.
func (d *duckDB) Load(ctx context.Context, t queries.Tables) error {
	for _, tb := range nexmarkTables {
		if _, err := d.conn.ExecContext(ctx, "DROP TABLE IF EXISTS "+tb.name); err != nil {
			return fmt.Errorf("peers: duckdb: drop %s: %w", tb.name, err)
		}
		if _, err := d.conn.ExecContext(ctx, tb.createSQL(true)); err != nil {
			return fmt.Errorf("peers: duckdb: create %s: %w", tb.name, err)
		}
		err := d.conn.Raw(func(dc any) error {
			conn, ok := dc.(driver.Conn)
			if !ok {
				return fmt.Errorf("driver connection is a %T", dc)
			}
			app, err := duckdb.NewAppenderFromConn(conn, "", tb.name)
			if err != nil {
				return err
			}
			src := newRowReader(tb, tb.records(t))
			args := make([]driver.Value, len(tb.cols))
			for src.Next() {
				vals, _ := src.Values()
				for i, v := range vals {
					args[i] = v
				}
				if err := app.AppendRow(args...); err != nil {
					app.Close()
					return err
				}
			}
			if err := src.Err(); err != nil {
				app.Close()
				return err
			}
			return app.Close()
		})
		if err != nil {
			return fmt.Errorf("peers: duckdb: append to %s: %w", tb.name, err)
		}
	}
	if _, err := d.conn.ExecContext(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("peers: duckdb: analyze: %w", err)
	}
	return nil
}

// Run times CREATE TABLE <name>_ctas AS <q.DuckDB>, reads the table back and drops it.
func (d *duckDB) Run(ctx context.Context, q queries.Query) (time.Duration, []queries.Row, error) {
	if q.DuckDB == "" {
		return 0, nil, fmt.Errorf("peers: duckdb: query %s has no DuckDB text", q.Name)
	}
	tab := quoteDuck(q.Name + "_ctas")
	drop := "DROP TABLE IF EXISTS " + tab
	if _, err := d.conn.ExecContext(ctx, drop); err != nil {
		return 0, nil, fmt.Errorf("peers: duckdb: %s: %w", q.Name, err)
	}
	start := time.Now()
	if _, err := d.conn.ExecContext(ctx, "CREATE TABLE "+tab+" AS "+q.DuckDB); err != nil {
		return 0, nil, fmt.Errorf("peers: duckdb: %s: create table as: %w", q.Name, err)
	}
	took := time.Since(start)
	defer func() {
		// Best effort: the next Run of the query drops it anyway.
		_, _ = d.conn.ExecContext(context.WithoutCancel(ctx), drop)
	}()
	rows, err := d.readAll(ctx, "SELECT "+selectList(q.Columns, quoteDuck)+" FROM "+tab)
	if err != nil {
		return took, nil, fmt.Errorf("peers: duckdb: %s: %w", q.Name, err)
	}
	return took, rows, nil
}

// quoteDuck quotes an identifier for DuckDB.
func quoteDuck(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// readAll runs sql and converts every row to canonical form.
func (d *duckDB) readAll(ctx context.Context, sql string) ([]queries.Row, error) {
	rows, err := d.conn.QueryContext(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, err
	}
	vals := make([]any, len(types))
	ptrs := make([]any, len(types))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var out []queries.Row
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row, err := canonRow(vals, func(i int, v any) (any, error) { return canonDuck(v, types[i].DatabaseTypeName()) },
			func(i int) string { return types[i].Name() })
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// canonDuck converts a value the DuckDB driver returned for a column of type typ to
// canonical form.
func canonDuck(v any, typ string) (any, error) {
	if c, ok, err := canonValue(v, typ == "DATE"); ok {
		return c, err
	}
	if v, ok := v.(duckdb.Decimal); ok {
		if v.Value == nil {
			return nil, nil
		}
		// Exact to float64 via the decimal string (Decimal.Float64 divides in float).
		f, err := strconv.ParseFloat(v.String(), 64)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	return nil, fmt.Errorf("unsupported value %T (type %s)", v, typ)
}

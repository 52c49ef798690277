package peers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seed04fbb902/weir/bench/nexmark/queries"
)

// postgres is the PostgreSQL peer: one connection whose session time zone is UTC.
type postgres struct {
	conn *pgx.Conn
}

// OpenPostgres connects to the PostgreSQL server at dsn (a URL or key=value string, as
// printed by scripts/pg.sh) and sets the session's time zone to UTC.
func OpenPostgres(ctx context.Context, dsn string) (Peer, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("peers: connect to postgres: %w", err)
	}
	if _, err := conn.Exec(ctx, "SET TimeZone = 'UTC'"); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("peers: postgres: %w", err)
	}
	return &postgres{conn: conn}, nil
}

func (p *postgres) Name() string { return "postgres" }

func (p *postgres) Close() error { return p.conn.Close(context.Background()) }

// Load drops the tables (and every view on them), creates them without keys, copies the
// rows in with COPY FROM STDIN (binary), adds the primary keys, then VACUUM ANALYZE.
func (p *postgres) Load(ctx context.Context, t queries.Tables) error {
	for _, tb := range nexmarkTables {
		if _, err := p.conn.Exec(ctx, "DROP TABLE IF EXISTS "+tb.name+" CASCADE"); err != nil {
			return fmt.Errorf("peers: postgres: drop %s: %w", tb.name, err)
		}
		if _, err := p.conn.Exec(ctx, tb.createSQL(false)); err != nil {
			return fmt.Errorf("peers: postgres: create %s: %w", tb.name, err)
		}
		src := newRowReader(tb, tb.records(t))
		if _, err := p.conn.CopyFrom(ctx, pgx.Identifier{tb.name}, tb.colNames(), src); err != nil {
			return fmt.Errorf("peers: postgres: copy into %s: %w", tb.name, err)
		}
		pk := fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (%s)", tb.name, strings.Join(tb.pk, ", "))
		if _, err := p.conn.Exec(ctx, pk); err != nil {
			return fmt.Errorf("peers: postgres: primary key of %s: %w", tb.name, err)
		}
		if _, err := p.conn.Exec(ctx, "VACUUM ANALYZE "+tb.name); err != nil {
			return fmt.Errorf("peers: postgres: vacuum analyze %s: %w", tb.name, err)
		}
	}
	return nil
}

// Run times CREATE MATERIALIZED VIEW <name>_mv AS <q.Postgres>, reads the view back and
// drops it.
func (p *postgres) Run(ctx context.Context, q queries.Query) (time.Duration, []queries.Row, error) {
	if q.Postgres == "" {
		return 0, nil, fmt.Errorf("peers: postgres: query %s has no PostgreSQL text", q.Name)
	}
	view := pgx.Identifier{q.Name + "_mv"}.Sanitize()
	drop := "DROP MATERIALIZED VIEW IF EXISTS " + view
	if _, err := p.conn.Exec(ctx, drop); err != nil {
		return 0, nil, fmt.Errorf("peers: postgres: %s: %w", q.Name, err)
	}
	start := time.Now()
	if _, err := p.conn.Exec(ctx, "CREATE MATERIALIZED VIEW "+view+" AS "+q.Postgres); err != nil {
		return 0, nil, fmt.Errorf("peers: postgres: %s: create materialized view: %w", q.Name, err)
	}
	took := time.Since(start)
	defer func() {
		// Best effort: the next Run of the query, or Load, drops it anyway.
		_, _ = p.conn.Exec(context.WithoutCancel(ctx), drop)
	}()

	rows, err := p.readAll(ctx, "SELECT "+selectList(q.Columns, quotePG)+" FROM "+view)
	if err != nil {
		return took, nil, fmt.Errorf("peers: postgres: %s: %w", q.Name, err)
	}
	return took, rows, nil
}

// quotePG quotes an identifier for PostgreSQL.
func quotePG(name string) string { return pgx.Identifier{name}.Sanitize() }

// selectList is the quoted, comma-separated column list.
func selectList(cols []string, quote func(string) string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = quote(c)
	}
	return strings.Join(q, ", ")
}

// readAll runs sql and converts every row to canonical form.
func (p *postgres) readAll(ctx context.Context, sql string) ([]queries.Row, error) {
	rows, err := p.conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	fields := rows.FieldDescriptions()
	var out []queries.Row
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		row, err := canonRow(vals, func(i int, v any) (any, error) { return canonPG(v, fields[i].DataTypeOID) },
			func(i int) string { return fields[i].Name })
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// canonPG converts a value pgx decoded from a column of type oid to canonical form.
// pgx returns a timestamp as the stored wall clock in UTC, a timestamptz as an
// instant.
func canonPG(v any, oid uint32) (any, error) {
	if c, ok, err := canonValue(v, oid == pgtype.DateOID); ok {
		return c, err
	}
	if v, ok := v.(pgtype.Numeric); ok {
		if !v.Valid {
			return nil, nil
		}
		if v.NaN || v.InfinityModifier != pgtype.Finite {
			return nil, fmt.Errorf("non-finite numeric")
		}
		f, err := v.Float64Value()
		if err != nil {
			return nil, err
		}
		return f.Float64, nil
	}
	return nil, fmt.Errorf("unsupported value %T (type oid %d)", v, oid)
}

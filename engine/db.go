package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
)

// DB is what a program does with an engine, whether it runs in the process (*Engine,
// from Open) or in another one (engine/cluster/remote's Dial, over Arrow Flight): a
// program written against DB runs against either by changing only how it opens the
// engine. Each method means what *Engine's does.
type DB interface {
	CreateTable(ctx context.Context, t *schema.Table, opts TableOptions) error
	Insert(ctx context.Context, table string, rec arrow.RecordBatch) error
	Upsert(ctx context.Context, table string, rec arrow.RecordBatch) error
	Update(ctx context.Context, table string, rec arrow.RecordBatch) error
	Delete(ctx context.Context, table string, rec arrow.RecordBatch) error
	CreateMV(ctx context.Context, name string, plan Plan, opts MVOptions) error
	DropMV(ctx context.Context, name string) error
	RescheduleMV(ctx context.Context, name string, parallelism int) error
	PauseMV(ctx context.Context, name string) error
	ResumeMV(ctx context.Context, name string) error
	SetRateLimit(ctx context.Context, name string, limit *int64) error
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	WaitCheckpoint(ctx context.Context) (executors.Epoch, error)
	Scan(ctx context.Context, name string) (array.RecordReader, error)
	Close() error
}

var _ DB = (*Engine)(nil)

// MarshalPlan encodes p as the JSON the catalog stores it as (UnmarshalPlan decodes
// it): how a plan travels to a remote engine.
func MarshalPlan(p Plan) ([]byte, error) {
	if p == nil {
		return nil, fmt.Errorf("no plan")
	}
	return marshalPlan(p)
}

// UnmarshalPlan decodes a plan MarshalPlan encoded; anything else is an error, never
// a panic.
func UnmarshalPlan(data []byte) (Plan, error) {
	p, err := unmarshalPlan(data)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	return p, nil
}

// MarshalTable encodes t (its name included) as JSON, in the form the catalog stores
// a table's definition in; UnmarshalTable decodes and validates it.
func MarshalTable(t *schema.Table) ([]byte, error) {
	if t == nil {
		return nil, fmt.Errorf("no table")
	}
	return json.Marshal(namedTableJSON{Name: t.Name, Def: tableToJSON(t)})
}

// UnmarshalTable decodes a table MarshalTable encoded and validates it.
func UnmarshalTable(data []byte) (*schema.Table, error) {
	var j namedTableJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	t, err := tableFromJSON(j.Name, j.Def)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", j.Name, err)
	}
	return t, nil
}

type namedTableJSON struct {
	Name string    `json:"name"`
	Def  tableJSON `json:"table"`
}

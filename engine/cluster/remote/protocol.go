package remote

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/seed04fbb902/weir/engine"
)

// The Flight actions of the protocol; each body is the JSON of its request.
const (
	actionCreateTable    = "weir.create_table.v1"
	actionCreateMV       = "weir.create_mv.v1"
	actionDropMV         = "weir.drop_mv.v1"
	actionRescheduleMV   = "weir.reschedule_mv.v1"
	actionWaitCheckpoint = "weir.wait_checkpoint.v1"
	actionPauseMV        = "weir.pause_mv.v1"
	actionResumeMV       = "weir.resume_mv.v1"
	actionSetRateLimit   = "weir.set_rate_limit.v1"
	actionPause          = "weir.pause.v1"
	actionResume         = "weir.resume.v1"
	actionProgress       = "weir.progress.v1"
	actionVnodeProgress  = "weir.vnode_progress.v1"
)

// request is the body of every action, a DoPut's descriptor command and a DoGet's
// ticket: the fields its kind uses.
type request struct {
	Name        string              `json:"name,omitempty"`        // a table or view
	Table       json.RawMessage     `json:"table,omitempty"`       // create_table: engine.MarshalTable
	TableOpts   engine.TableOptions `json:"table_opts"`            // create_table
	Plan        json.RawMessage     `json:"plan,omitempty"`        // create_mv: engine.MarshalPlan
	MVOpts      engine.MVOptions    `json:"mv_opts"`               // create_mv
	Parallelism int                 `json:"parallelism,omitempty"` // reschedule_mv
	RateLimit   *int64              `json:"rate_limit,omitempty"`  // set_rate_limit: rows/s per actor; absent: unlimited
	Op          string              `json:"op,omitempty"`          // DoPut: insert, upsert, update, delete
}

// The write operations of a DoPut.
var writeOps = []string{"insert", "upsert", "update", "delete"}

// decodeRequest decodes the JSON of a request of kind what, refusing unknown fields
// and trailing data.
func decodeRequest(what string, data []byte) (request, error) {
	var r request
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		return request{}, fmt.Errorf("%s: bad request: %w", what, err)
	}
	if d.More() {
		return request{}, fmt.Errorf("%s: bad request: data after the JSON object", what)
	}
	return r, nil
}

// needName checks that r names an object.
func (r request) needName(what string) error {
	if r.Name == "" {
		return fmt.Errorf("%s: the request names no table or view", what)
	}
	return nil
}

// checkOp checks a DoPut's operation.
func (r request) checkOp() error {
	for _, op := range writeOps {
		if r.Op == op {
			return r.needName("write")
		}
	}
	return fmt.Errorf("write: operation %q, want one of %v", r.Op, writeOps)
}

// epochResult is the body of wait_checkpoint's result.
type epochResult struct {
	Epoch uint64 `json:"epoch"`
}

package commitlog

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/seed04fbb902/weir/storage"
)

// changesVersion is the version of the encoding of a commit's changes, the opaque
// catalog bytes of a meta delta.
const changesVersion = 1

// wireChanges is the JSON form of storage.Changes without its sequence (the delta's
// own): catalog entries (null deletes one) and dropped tables.
type wireChanges struct {
	V       int               `json:"v"`
	Catalog map[string][]byte `json:"catalog,omitempty"`
	Drops   []uint32          `json:"drops,omitempty"`
}

// encodeChanges encodes ch's catalog entries and drops for a meta delta.
func encodeChanges(ch storage.Changes) ([]byte, error) {
	b, err := json.Marshal(wireChanges{V: changesVersion, Catalog: ch.Catalog, Drops: ch.Drops})
	if err != nil {
		return nil, fmt.Errorf("encode the commit's changes: %w", err)
	}
	return b, nil
}

// decodeChanges decodes a delta's changes, refusing another version, unknown fields
// and trailing data (storage.Store.IngestFiles checks the tables dropped).
func decodeChanges(b []byte) (storage.Changes, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var w wireChanges
	if err := d.Decode(&w); err != nil {
		return storage.Changes{}, fmt.Errorf("decode the commit's changes: %w", err)
	}
	if d.More() {
		return storage.Changes{}, fmt.Errorf("decode the commit's changes: data after the changes")
	}
	if w.V != changesVersion {
		return storage.Changes{}, fmt.Errorf("decode the commit's changes: version %d, this build reads %d", w.V, changesVersion)
	}
	return storage.Changes{Catalog: w.Catalog, Drops: w.Drops}, nil
}

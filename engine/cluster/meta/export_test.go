package meta

// SchemaV1 is the schema of version 1, for the migration tests.
const SchemaV1 = schemaV1

// SchemaV2 is what version 2 added, for the migration test.
const SchemaV2 = schemaV2

package meta

// SchemaV1 is the schema of version 1, for the migration test.
const SchemaV1 = schemaV1

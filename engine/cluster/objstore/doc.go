// Package objstore holds a cluster's committed data on object storage
// (docs/design.md §8, "Checkpoint commit"): each compute node uploads the sstables of
// its sealed epoch to a bucket under names of its own, the meta service commits a
// version that references them, and every node applies the versions in order by
// downloading the objects of the ranges it owns and ingesting them into its local
// pebble, a copy of the committed state that can always be rebuilt from the bucket.
// Objects that no version references are collected after a grace period.
//
// Buckets are gocloud.dev/blob buckets: file:// (fileblob, for tests and local
// clusters) and mem:// (memblob) are linked in; a production build links the driver
// of its provider (s3blob) the same way. The package reads and writes the objects; it
// does not know the versions, which the meta store keeps.
//
// # Files
//
//   - name.go: Name, an object's name (e<epoch>-n<node>-i<incarnation>-<k>.sst, or
//     b<epoch>-... for a base's): String and ParseName, which refuses any other form.
//   - bucket.go: OpenBucket, Collect, Stale and Delete.
//   - sync.go: Object, Upload (a node's sealed epoch to the bucket; UploadKeep keeps
//     local copies) and Apply (a committed version's objects into a store; ApplyLocal
//     from the kept copies).
//   - base.go: UploadBase (a store's whole committed state) and ApplyBase (into an
//     empty store).
package objstore

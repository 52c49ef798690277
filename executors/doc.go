// Package executors holds Weir's streaming executors and their contract: the messages
// that flow between them (chunks, barriers with their mutations, watermarks) and the
// Executor interface (contract.go). Every executor documents what it does with each
// kind of message.
package executors

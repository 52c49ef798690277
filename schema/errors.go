package schema

import (
	"fmt"
	"strings"
)

// Error is one problem in a schema: where it is and what is wrong. Its text is
// "file:line: field: reason" (file and line are left out for tables built in code).
type Error struct {
	File   string
	Line   int
	Field  string // e.g. "bid.columns.price.type", "bid.primary_key[1]"
	Reason string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
		if e.Line > 0 {
			fmt.Fprintf(&b, "%d:", e.Line)
		}
		b.WriteByte(' ')
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// ErrorList is every problem found in one schema, in file order.
type ErrorList []*Error

func (l ErrorList) Error() string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Err returns nil for an empty list and the list otherwise.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

func (l *ErrorList) add(file string, line int, field, format string, args ...any) {
	*l = append(*l, &Error{File: file, Line: line, Field: field, Reason: fmt.Sprintf(format, args...)})
}

// Command weir is Weir's command line: the demo (the Nexmark views built by arrangement
// backfill while events flow, with rescales, throttles, pauses and a crash), the
// benchmarks, status and export of an engine directory, and the schemas it knows.
package main

import (
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "weir",
		Short:         "Weir: vectorized streaming executors with arrangement backfill",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newDemo())
	root.AddCommand(newBench())
	root.AddCommand(newSchemas())
	root.AddCommand(newStatus())
	root.AddCommand(newExport())
	root.AddCommand(newSim())
	return root
}

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
	root.AddCommand(newServe())
	root.AddCommand(newMeta())
	root.AddCommand(newCompute())
	root.AddCommand(newCluster())
	return root
}

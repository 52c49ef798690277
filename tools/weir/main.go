// Command weir is Weir's command line. Until the engine lands, `weir demo` summarises
// the schemas Weir knows: every table whose kernels are generated and registered.
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
	return root
}

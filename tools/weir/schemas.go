package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/spf13/cobra"
)

// known are the tables whose generated code this binary links.
func known() []*schema.Table {
	return []*schema.Table{tables.PersonTable(), tables.AuctionTable(), tables.BidTable()}
}

type tableSummary struct {
	Table       string   `json:"table"`
	Columns     []string `json:"columns"`
	PrimaryKey  []string `json:"primary_key"`
	DistKey     []string `json:"distribution_key"`
	Vnodes      int      `json:"vnodes"`
	Fingerprint string   `json:"fingerprint"`
	Generated   bool     `json:"generated_kernels"`
}

func summarize(t *schema.Table) tableSummary {
	s := tableSummary{Table: t.Name, Vnodes: t.VnodeCount, Fingerprint: t.Fingerprint()}
	for _, c := range t.Columns {
		n := c.Name + " " + c.Type.String()
		if c.Nullable {
			n += " null"
		}
		s.Columns = append(s.Columns, n)
	}
	for _, k := range t.PK {
		n := t.Columns[k.Column].Name
		if k.Desc {
			n += " desc"
		}
		s.PrimaryKey = append(s.PrimaryKey, n)
	}
	for _, d := range t.DistKey {
		s.DistKey = append(s.DistKey, t.Columns[d].Name)
	}
	k := vec.For(t)
	s.Generated = k.Generated()
	return s
}

func newSchemas() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "schemas",
		Short: "Summarise the schemas this binary has generated code for",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var sums []tableSummary
			for _, t := range known() {
				sums = append(sums, summarize(t))
			}
			return printSummaries(cmd.OutOrStdout(), sums, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printSummaries(w io.Writer, sums []tableSummary, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(sums)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tCOLUMNS\tPRIMARY KEY\tDISTRIBUTION KEY\tVNODES\tKERNELS\tFINGERPRINT")
	for _, s := range sums {
		kind := "generic"
		if s.Generated {
			kind = "generated"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\n", s.Table, len(s.Columns), strings.Join(s.PrimaryKey, ", "),
			strings.Join(s.DistKey, ", "), s.Vnodes, kind, s.Fingerprint)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range sums {
		fmt.Fprintf(w, "\n%s:\n  %s\n", s.Table, strings.Join(s.Columns, "\n  "))
	}
	return nil
}

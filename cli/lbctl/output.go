package lbctl

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// render prints v as JSON or YAML, or calls table for the table format.
func (e *env) render(v any, table func(w io.Writer) error) error {
	switch e.format {
	case "json":
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = e.out.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	if err := table(tw); err != nil {
		return err
	}
	return tw.Flush()
}

// progressf prints a progress line to stderr (kept off stdout so JSON output
// stays parseable).
func (e *env) progressf(format string, args ...any) {
	fmt.Fprintf(e.c.App.ErrWriter, format+"\n", args...)
}

package lbctl

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/sluicelb/sluice/api/config"

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

// wrote reports what a command did: text in the table format, v (what was
// written, with the new revision) in JSON or YAML.
func (e *env) wrote(v any, text string) error {
	if e.format == "table" {
		_, err := io.WriteString(e.out, text)
		return err
	}
	return e.render(v, nil)
}

// writeResult is the JSON/YAML shape of what a write command did.
type writeResult struct {
	Action           string         `json:"action"`             // pinned, unpinned, drained, undrained, applied, unchanged, rolled_back, created, paused, …
	Revision         int64          `json:"revision,omitempty"` // the desired state's etcd revision after the write
	PreviousRevision int64          `json:"previous_revision,omitempty"`
	Pins             []config.Pin   `json:"pins,omitempty"`
	Drains           []config.Drain `json:"drains,omitempty"`
	Shift            *shiftView     `json:"shift,omitempty"`
}

// info is where a command's narration goes (diffs, previews, questions):
// stdout in the table format, stderr otherwise, so that JSON and YAML on
// stdout stay one parseable document.
func (e *env) info() io.Writer {
	if e.format == "table" {
		return e.out
	}
	return e.c.App.ErrWriter
}

// progressf prints a progress line to stderr (kept off stdout so JSON output
// stays parseable).
func (e *env) progressf(format string, args ...any) {
	fmt.Fprintf(e.c.App.ErrWriter, format+"\n", args...)
}

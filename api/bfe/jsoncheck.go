package bfe

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluicelb/sluice/api/codec"
)

// FileError is a problem with one value of one BFE file.
type FileError struct {
	File string // the file as given to the loader
	Path string // e.g. Config.p1.CheckConf.StatusCode; empty for the whole file
	Msg  string
}

func (e *FileError) Error() string {
	if e.Path == "" {
		return e.File + ": " + e.Msg
	}
	return e.File + ": " + e.Path + ": " + e.Msg
}

// decodeFile checks raw against the Go type of v the way BFE's decoder reads
// it (field names match case-insensitively, unknown fields are ignored), but
// stricter where BFE is silently lossy: a duplicate key is an error (BFE keeps
// the last value). Wrong types and syntax errors are errors, as in BFE. Unknown
// fields become warnings. On success raw is decoded into v.
func decodeFile(file string, raw []byte, v any) ([]string, error) {
	var warnings []string
	err := codec.CheckWith(raw, v, codec.CheckOptions{
		FoldCase: true,
		Unknown: func(path string) error {
			warnings = append(warnings, fmt.Sprintf("%s: %s: unknown field ignored (BFE ignores it too)", file, path))
			return nil
		},
		Duplicate: func(key string) string {
			return fmt.Sprintf("duplicate key %q: BFE silently keeps the last value; Sluice is stricter and rejects the file", key)
		},
		Note: " (BFE rejects it too)",
	})
	var pe *codec.PathError
	if errors.As(err, &pe) {
		return nil, &FileError{File: file, Path: pe.Path, Msg: pe.Msg}
	}
	if err != nil {
		return nil, &FileError{File: file, Msg: err.Error()}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, &FileError{File: file, Msg: err.Error()}
	}
	return warnings, nil
}

// join appends a key to a dotted path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

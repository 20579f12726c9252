// Package codec decodes Sluice documents strictly. JSON and YAML are both
// accepted (YAML is converted to JSON first); unknown fields, duplicate keys,
// wrong types (a weight of 1.5, "10" or 1e309), invalid UTF-8 and trailing
// data are errors that name the path of the offending value, for example
// `clusters.demo-main.subclusters.SC1.instances[2].port: 1.5 is not an integer`.
//
// Every component decodes through this package, so a document one component
// accepts is a document every component accepts.
package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// MaxDocument bounds the size of one document (desired state or snapshot JSON).
const MaxDocument = 512 << 20

// Unmarshal decodes a JSON or YAML document into v strictly.
func Unmarshal(raw []byte, v any) error {
	j, err := ToJSON(raw)
	if err != nil {
		return err
	}
	return UnmarshalJSON(j, v)
}

// ToJSON returns raw as JSON: JSON input is returned unchanged, YAML is
// converted (duplicate YAML keys are errors, and so are plain scalars that
// YAML 1.1 reads as non-decimal numbers, such as 010, 0x10, 1_000 or .inf;
// a float written with an integral value, 1.0 or 1e3, stays one: see
// keepFloats).
func ToJSON(raw []byte) ([]byte, error) {
	if len(raw) > MaxDocument {
		return nil, fmt.Errorf("document is %d bytes, larger than the %d-byte limit", len(raw), MaxDocument)
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("document is not valid UTF-8")
	}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return nil, errors.New("document is empty")
	}
	if t[0] == '{' || t[0] == '[' {
		return raw, nil
	}
	floats, err := checkYAMLScalars(raw)
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		// sigs.k8s.io/yaml already says "yaml: ...".
		return nil, err
	}
	return keepFloats(j, floats)
}

// UnmarshalJSON decodes JSON into v strictly: it first checks the document
// against v's type (paths in errors), then decodes.
func UnmarshalJSON(raw []byte, v any) error {
	if !utf8.Valid(raw) {
		return errors.New("document is not valid UTF-8")
	}
	if err := Check(raw, v); err != nil {
		return err
	}
	return DecodeFields(raw, v)
}

// DecodeFields decodes exactly one JSON value into v with unknown fields
// disallowed. Custom UnmarshalJSON methods use it, since the outer decoder's
// DisallowUnknownFields does not reach into them.
func DecodeFields(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("unexpected data after the top-level value")
	}
	return nil
}

// DecodeValue decodes a value stored in etcd under key strictly, as
// UnmarshalJSON does; the error names the key. Every record Sluice reads
// back from etcd (pointers, manifests, status, demand, registrations,
// leader records) is decoded through it or UnmarshalJSON.
func DecodeValue(key string, raw []byte, v any) error {
	if err := UnmarshalJSON(raw, v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

package bfe

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ServerConf is what lbproxy takes from BFE's bfe.conf: the [Server] ports.
// A zero port means the file does not set it.
type ServerConf struct {
	HTTPPort    int
	HTTPSPort   int
	MonitorPort int // BFE's monitor port; lbproxy serves its admin API there
}

// ServerConfName is BFE's main configuration file.
const ServerConfName = "bfe.conf"

// ReadServerConf reads bfe.conf from dir, or from dir/../conf when dir has
// none. A missing file returns the zero ServerConf and an error wrapping
// os.ErrNotExist. Only the [Server] keys HttpPort, HttpsPort and MonitorPort
// are read (case-insensitively); every other section and key is ignored.
func ReadServerConf(dir string) (ServerConf, error) {
	candidates := []string{filepath.Join(dir, ServerConfName), filepath.Join(dir, "..", "conf", ServerConfName)}
	for _, path := range candidates {
		raw, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return ServerConf{}, fmt.Errorf("bfe.conf: %w", err)
		}
		return parseServerConf(path, raw)
	}
	return ServerConf{}, fmt.Errorf("bfe.conf: none in %s or %s: %w", candidates[0], candidates[1], os.ErrNotExist)
}

func parseServerConf(path string, raw []byte) (ServerConf, error) {
	var sc ServerConf
	section := ""
	sn := bufio.NewScanner(bytes.NewReader(raw))
	for line := 1; sn.Scan(); line++ {
		t := strings.TrimSpace(sn.Text())
		if t == "" || t[0] == '#' || t[0] == ';' {
			continue
		}
		if strings.HasPrefix(t, "[") {
			if !strings.HasSuffix(t, "]") {
				return ServerConf{}, fmt.Errorf("%s:%d: section header %q has no closing ]", path, line, t)
			}
			section = strings.ToLower(strings.TrimSpace(t[1 : len(t)-1]))
			continue
		}
		key, val, ok := strings.Cut(t, "=")
		if !ok {
			return ServerConf{}, fmt.Errorf("%s:%d: %q is not key = value", path, line, t)
		}
		if section != "server" {
			continue
		}
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		var dst *int
		switch key {
		case "httpport":
			dst = &sc.HTTPPort
		case "httpsport":
			dst = &sc.HTTPSPort
		case "monitorport":
			dst = &sc.MonitorPort
		default:
			continue
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > 65535 {
			return ServerConf{}, fmt.Errorf("%s:%d: [Server] %s = %q is not a port in 1..65535", path, line, strings.TrimSpace(strings.SplitN(t, "=", 2)[0]), val)
		}
		*dst = n
	}
	if err := sn.Err(); err != nil {
		return ServerConf{}, fmt.Errorf("%s: %w", path, err)
	}
	return sc, nil
}

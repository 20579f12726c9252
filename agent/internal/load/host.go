package load

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Host samples the CPU and memory use of the machine from /proc. It keeps
// the previous CPU counters to compute a percentage over the interval
// between two samples; it is not safe for concurrent use.
type Host struct {
	root                string
	prevBusy, prevTotal uint64
	havePrev            bool
}

// NewHost reads from procRoot ("" means /proc).
func NewHost(procRoot string) *Host {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &Host{root: procRoot}
}

// HostSample is one reading. CPUPercent is valid only when HaveCPU (from
// the second sample on).
type HostSample struct {
	CPUPercent float64
	HaveCPU    bool
	MemPercent float64
}

// Sample reads /proc/stat and /proc/meminfo.
func (h *Host) Sample() (HostSample, error) {
	var s HostSample
	busy, total, err := readCPU(filepath.Join(h.root, "stat"))
	if err != nil {
		return s, err
	}
	if h.havePrev && total > h.prevTotal && busy >= h.prevBusy {
		s.CPUPercent = 100 * float64(busy-h.prevBusy) / float64(total-h.prevTotal)
		s.HaveCPU = true
	}
	h.prevBusy, h.prevTotal, h.havePrev = busy, total, true
	mem, err := readMem(filepath.Join(h.root, "meminfo"))
	if err != nil {
		return s, err
	}
	s.MemPercent = mem
	return s, nil
}

// readCPU returns busy and total jiffies from the aggregate "cpu" line:
// user nice system idle iowait irq softirq steal; idle and iowait are not busy.
func readCPU(path string) (busy, total uint64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("cpu: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		var vals []uint64
		for _, x := range f[1:] {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("cpu: %s: %q is not a counter", path, x)
			}
			vals = append(vals, v)
		}
		if len(vals) > 8 { // guest and guest_nice are already in user and nice
			vals = vals[:8]
		}
		var idle uint64
		for i, v := range vals {
			total += v
			if i == 3 || i == 4 {
				idle += v
			}
		}
		return total - idle, total, nil
	}
	return 0, 0, fmt.Errorf("cpu: %s has no aggregate cpu line", path)
}

// readMem returns the used share of memory in percent: 1 − MemAvailable/MemTotal.
func readMem(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	var totalKB, availKB uint64
	var haveTotal, haveAvail bool
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			totalKB, haveTotal = v, true
		case "MemAvailable:":
			availKB, haveAvail = v, true
		}
	}
	if !haveTotal || !haveAvail || totalKB == 0 || availKB > totalKB {
		return 0, fmt.Errorf("memory: %s lacks usable MemTotal/MemAvailable", path)
	}
	return 100 * float64(totalKB-availKB) / float64(totalKB), nil
}

package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of /proc's CPU times (USER_HZ), 100 on every Linux ABI
// Go supports.
const clockTick = 10 * time.Millisecond

// raiseFileLimit raises this process's soft limit on open files to want, or to
// the hard limit if that is lower; it fails when even that is below want.
func raiseFileLimit(want uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= want {
		return nil
	}
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raising RLIMIT_NOFILE to %d: %w", lim.Cur, err)
	}
	if lim.Cur < want {
		return fmt.Errorf("RLIMIT_NOFILE: hard limit %d, need %d (ulimit -Hn)", lim.Max, want)
	}
	return nil
}

// procCPU returns the user and system CPU time a process has used so far.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold blanks.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// selfCPU returns this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procMem returns a process's resident set (VmRSS) and its peak (VmHWM), in bytes.
func procMem(pid int) (rss, peak int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(data)) {
		key, v, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %s %q", pid, key, v)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak, nil
}

// processCPU returns the CPU time of every process on the machine so far, by
// PID. /proc/stat's machine-wide counters are sampled at the timer tick and
// miss much of this load test's short, timer-driven bursts (on the 2-core VM
// they read less than the adapter's own /proc/<pid>/stat); the per-process
// times are exact.
func processCPU() map[int]time.Duration {
	out := map[int]time.Duration{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, err := procCPU(pid); err == nil {
			out[pid] = t
		}
	}
	return out
}

// cpuSince returns the CPU time the processes alive now used since before, a
// snapshot of processCPU: processes that ended in between are missed, so it is
// a lower bound.
func cpuSince(before map[int]time.Duration) time.Duration {
	var t time.Duration
	for pid, now := range processCPU() {
		t += now - before[pid]
	}
	return t
}

// loadAvg returns the one-minute load average.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

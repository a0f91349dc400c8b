package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// rowChange is one change of a lease-table row: as the load logged it in
// the transaction that made it, or as leasewatch stored it (an event).
type rowChange struct {
	lock, kind, holder string
	at                 time.Time // the transaction's commit time
}

// changeKey is what identifies a change on both sides: its lock, kind and
// holder, and its commit time to the microsecond, PostgreSQL's resolution.
func (c rowChange) key() string {
	return c.lock + "\x00" + c.kind + "\x00" + c.holder + "\x00" + strconv.FormatInt(c.at.UnixMicro(), 10)
}

// changeCheck is the comparison, change by change, of what the database
// logged with what leasewatch stored.
type changeCheck struct {
	matched  int
	missed   int      // logged, not stored
	twice    int      // stored more often than logged
	unlogged int      // stored, never logged
	examples []string // two of each kind of difference
}

// checkChanges compares logged with stored, each change once: a change
// stored twice is not made up for by another missed.
func checkChanges(logged, stored []rowChange) changeCheck {
	var c changeCheck
	want := make(map[string]int, len(logged))
	for _, l := range logged {
		want[l.key()]++
	}
	got := make(map[string]int, len(stored))
	for _, s := range stored {
		got[s.key()]++
	}
	noted := map[string]int{}
	note := func(what string, ch rowChange) {
		if noted[what]++; noted[what] <= 2 { // two of each
			c.examples = append(c.examples, fmt.Sprintf("%s %s of %s by %s committed %s", what, ch.kind, ch.lock, ch.holder, ch.at.UTC().Format(time.RFC3339Nano)))
		}
	}
	for _, l := range logged {
		k := l.key()
		n, ok := got[k]
		switch {
		case !ok || n == 0:
			c.missed++
			note("missed:", l)
		default:
			c.matched++
		}
		got[k] = n - 1
	}
	for _, s := range stored {
		k := s.key()
		if got[k] <= 0 {
			continue
		}
		got[k]--
		if want[k] > 0 {
			c.twice++
			note("stored twice:", s)
		} else {
			c.unlogged++
			note("never made:", s)
		}
	}
	return c
}

func (c changeCheck) summary() string {
	s := fmt.Sprintf("%d matched, %d missed, %d stored twice, %d stored but never made", c.matched, c.missed, c.twice, c.unlogged)
	if len(c.examples) > 0 {
		s += " (" + strings.Join(c.examples, "; ") + ")"
	}
	return s
}

// serverCPU is the CPU time the postmaster pid and every process it
// started have used so far (a backend that has exited takes its share
// with it), from /proc; 0 if pid is not running.
func serverCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	st, err := readProcStats(pid)
	if err != nil {
		return 0
	}
	total := st.cpu
	for _, child := range childPids(pid) {
		if st, err := readProcStats(child); err == nil {
			total += st.cpu
		}
	}
	return total
}

// childPids lists the processes whose parent is pid.
func childPids(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, path := range stats {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(raw), ')')
		fields := strings.Fields(string(raw[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			out = append(out, child)
		}
	}
	return slices.Sorted(slices.Values(out))
}

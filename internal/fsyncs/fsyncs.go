// Package fsyncs counts the fsync and fdatasync system calls the process
// makes, for the durability benchmarks: under SyncAlways every durable
// append is one, and their number per step is what the benchmark reports.
//
// It counts with the kernel's syscall tracepoints through perf_event_open,
// one counter per thread of the process, each inherited by the threads the
// thread later starts, so the count covers the whole process (the embedded
// JetStream server included) from [Start] on. It needs tracefs mounted and
// the right to open tracepoint counters (root, or a perf_event_paranoid
// that allows it); [Start] says plainly when it cannot.
package fsyncs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tracepoints are the system calls counted.
var tracepoints = []string{"sys_enter_fsync", "sys_enter_fdatasync"}

// tracefs is where the kernel's tracepoint ids are read.
var tracefs = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// Counter counts the process's fsyncs from its start. Its methods are safe
// for concurrent use.
type Counter struct {
	mu  sync.Mutex
	fds []int
}

// Start opens the counters. Close releases them.
func Start() (*Counter, error) {
	var ids []uint64
	for _, tp := range tracepoints {
		id, err := tracepointID(tp)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	tids, err := threads()
	if err != nil {
		return nil, err
	}
	c := &Counter{}
	for _, tid := range tids {
		for _, id := range ids {
			attr := unix.PerfEventAttr{
				Type:        unix.PERF_TYPE_TRACEPOINT,
				Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
				Config:      id,
				Sample_type: 0,
				Bits:        unix.PerfBitInherit,
			}
			fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if errors.Is(err, unix.ESRCH) {
				break // the thread ended meanwhile
			}
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("count fsyncs: open a tracepoint counter on thread %d: %w (needs root, or kernel.perf_event_paranoid ≤ -1)", tid, err)
			}
			c.fds = append(c.fds, fd)
		}
	}
	return c, nil
}

// Count returns the fsyncs and fdatasyncs made since Start.
func (c *Counter) Count() (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var total uint64
	var buf [8]byte
	for _, fd := range c.fds {
		n, err := unix.Read(fd, buf[:])
		if err != nil {
			return 0, fmt.Errorf("count fsyncs: read a counter: %w", err)
		}
		if n != len(buf) {
			return 0, fmt.Errorf("count fsyncs: read %d bytes of a counter, want 8", n)
		}
		total += binary.NativeEndian.Uint64(buf[:])
	}
	return total, nil
}

// Close releases the counters.
func (c *Counter) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fd := range c.fds {
		_ = unix.Close(fd)
	}
	c.fds = nil
}

func tracepointID(name string) (uint64, error) {
	var errs []error
	for _, dir := range tracefs {
		b, err := os.ReadFile(dir + "/events/syscalls/" + name + "/id")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("count fsyncs: tracepoint %s: id %q: %w", name, b, err)
		}
		return id, nil
	}
	return 0, fmt.Errorf("count fsyncs: no tracepoint %s (is tracefs mounted, and readable?): %w", name, errors.Join(errs...))
}

// threads lists the process's threads.
func threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("count fsyncs: list threads: %w", err)
	}
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

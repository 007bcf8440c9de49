package fsyncs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/arbiter-run/arbiter/internal/fsyncs"
)

// TestCounter_CountsFsyncsOfEveryThread: fsyncs made after Start, from
// goroutines locked to threads that existed before it and to threads started
// after it, are all counted, and nothing else is.
func TestCounter_CountsFsyncsOfEveryThread(t *testing.T) {
	// A thread the runtime starts while Start lists the threads can slip
	// past it; so a miscount is tried again, and three in a row fail.
	var errs []string
	for range 3 {
		err := countOnce(t)
		if err == "" {
			return
		}
		errs = append(errs, err)
	}
	t.Errorf("fsyncs counted wrong three times: %v", errs)
}

func countOnce(t *testing.T) string {
	c, err := fsyncs.Start()
	if err != nil {
		t.Skipf("this machine cannot count fsyncs: %v", err)
	}
	defer c.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before, err := c.Count()
	if err != nil {
		t.Fatal(err)
	}
	const each, workers = 5, 8
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A locked goroutine that exits without unlocking takes its
			// thread with it, so later goroutines get new threads.
			runtime.LockOSThread()
			for range each {
				if _, err := f.Write([]byte("x")); err != nil {
					t.Error(err)
				}
				if err := f.Sync(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	after, err := c.Count()
	if err != nil {
		t.Fatal(err)
	}
	// Nothing else in this test binary fsyncs.
	if got, want := after-before, uint64(each*workers); got != want {
		return fmt.Sprintf("got %d, want %d", got, want)
	}
	return ""
}

package mem_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store"
	"github.com/fenceproxy/fenceproxy/store/mem"
	"github.com/fenceproxy/fenceproxy/store/storetest"
)

var (
	_ fence.Store     = (*mem.Store)(nil)
	_ fence.StartView = (*mem.Store)(nil)
)

// The in-memory store passes the storage contract's conformance suite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) storetest.Opener {
		d := mem.NewDisk()
		return func() (store.Store, error) {
			s, err := mem.Open(d)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	})
}

func open(t *testing.T, d *mem.Disk, opts mem.Options) *mem.Store {
	t.Helper()
	s, err := mem.OpenWith(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// One Store at a time has a Disk open, like store/badger's flock on its
// directory; a refused Open leaves the holder undisturbed.
func TestOpenTwiceFails(t *testing.T) {
	d := mem.NewDisk()
	s := open(t, d, mem.Options{})
	if s2, err := mem.Open(d); !errors.Is(err, mem.ErrLocked) {
		t.Fatalf("second Open = %v, %v; want ErrLocked", s2, err)
	}
	if _, err := s.Raise("k", 3); err != nil {
		t.Fatalf("holder Raise after a refused Open: %v", err)
	}
	if _, err := mem.Open(mem.NewDisk()); err != nil {
		t.Fatalf("Open of another Disk: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, d, mem.Options{})
	if m, err := s.Max("k"); err != nil || m != 3 {
		t.Fatalf("Max after reopen = %d, %v; want 3", m, err)
	}
}

// A hook's error fails its call with it as is, and nothing is written.
func TestHookErrors(t *testing.T) {
	boom := errors.New("disk on fire")
	d := mem.NewDisk()
	ran := false
	s := open(t, d, mem.Options{
		BeforeMax:         func(string) error { return boom },
		BeforeRaise:       func(string, uint64) error { return boom },
		BeforeUpdateLease: func(string) error { return boom },
		BeforeMarkWritten: func(string) error { return boom },
	})
	if _, err := s.Max("r"); err != boom {
		t.Errorf("Max = %v, want the hook's error", err)
	}
	if _, err := s.Raise("r", 5); err != boom {
		t.Errorf("Raise = %v, want the hook's error", err)
	}
	if _, err := s.Raise("r", 1<<63); !errors.Is(err, mem.ErrRange) {
		t.Errorf("Raise out of range = %v, want ErrRange before the hook", err)
	}
	err := s.UpdateLease("r", func([]byte, uint64) ([]byte, uint64, error) { ran = true; return []byte("x"), 5, nil })
	if err != boom || ran {
		t.Errorf("UpdateLease = %v, fn ran %v; want the hook's error, fn not run", err, ran)
	}
	if err := s.MarkWritten("r"); err != boom {
		t.Errorf("MarkWritten = %v, want the hook's error", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, d, mem.Options{})
	if m, found, err := s.MaxAtOpen("r"); err != nil || found || m != 0 {
		t.Errorf("MaxAtOpen after failed calls = %d, %v, %v; want no record", m, found, err)
	}
	if rec, err := s.Lease("r"); err != nil || rec != nil {
		t.Errorf("Lease after a failed UpdateLease = %q, %v; want nil", rec, err)
	}
}

// A raise held in its hook holds up itself only: Max answers the old
// maximum meanwhile and other raises go through; released, it completes.
func TestHoldRaise(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	s := open(t, mem.NewDisk(), mem.Options{
		BeforeRaise: func(resource string, tok uint64) error {
			if resource == "held" && tok == 9 {
				close(entered)
				<-release
			}
			return nil
		},
	})
	if _, err := s.Raise("held", 2); err != nil {
		t.Fatal(err)
	}
	done := make(chan uint64, 1)
	go func() {
		m, err := s.Raise("held", 9)
		if err != nil {
			t.Error(err)
		}
		done <- m
	}()
	<-entered
	if m, err := s.Max("held"); err != nil || m != 2 {
		t.Fatalf("Max while the raise is held = %d, %v; want 2", m, err)
	}
	if m, err := s.Raise("other", 4); err != nil || m != 4 {
		t.Fatalf("another raise while one is held = %d, %v; want 4", m, err)
	}
	select {
	case m := <-done:
		t.Fatalf("the held raise returned %d before its release", m)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if m := <-done; m != 9 {
		t.Fatalf("released raise = %d, want 9", m)
	}
	if m, err := s.Max("held"); err != nil || m != 9 {
		t.Fatalf("Max after the release = %d, %v; want 9", m, err)
	}
}

// EachLease's fn may call the store: it walks a copy.
func TestEachLeaseFnMayCallTheStore(t *testing.T) {
	s := open(t, mem.NewDisk(), mem.Options{})
	for _, name := range []string{"a", "b"} {
		if err := s.UpdateLease(name, func([]byte, uint64) ([]byte, uint64, error) { return []byte("rec"), 1, nil }); err != nil {
			t.Fatal(err)
		}
	}
	err := s.EachLease(func(name string, rec []byte) error {
		_, err := s.Raise(name, 2)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := s.Max("b"); m != 2 {
		t.Fatalf("Max(b) = %d, want 2", m)
	}
}

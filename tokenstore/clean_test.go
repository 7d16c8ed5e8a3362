package tokenstore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCleanStopMark(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if clean, err := s.TakeCleanStop(); err != nil || clean {
		t.Fatalf("fresh store: clean=%v err=%v, want false", clean, err)
	}
	if err := s.MarkCleanStop(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.MarkCleanStop(); !errors.Is(err, ErrClosed) {
		t.Fatalf("MarkCleanStop after Close: %v, want ErrClosed", err)
	}

	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if clean, err := s.TakeCleanStop(); err != nil || !clean {
		t.Fatalf("after a marked stop: clean=%v err=%v, want true", clean, err)
	}
	if _, err := os.Stat(filepath.Join(dir, cleanStopFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the mark is still there after TakeCleanStop: %v", err)
	}
	s.Close() // without a mark, as a crash would leave it

	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if clean, err := s.TakeCleanStop(); err != nil || clean {
		t.Fatalf("after an unmarked stop: clean=%v err=%v, want false", clean, err)
	}
}

// A CLEAN_STOP that is not a regular file is refused, not taken for a mark.
func TestCleanStopMarkMustBeAFile(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.Mkdir(filepath.Join(dir, cleanStopFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if clean, err := s.TakeCleanStop(); err == nil || clean {
		t.Fatalf("a directory named %s: clean=%v err=%v, want an error", cleanStopFile, clean, err)
	}
}

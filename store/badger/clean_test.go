package badger

import (
	"os"
	"path/filepath"
	"testing"
)

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

package badger

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// cleanStopFile is the mark a process leaves in the data directory when it
// stopped with no forwarded write unfinished (see MarkCleanStop).
const cleanStopFile = "CLEAN_STOP"

// MarkCleanStop records durably (file written, fsynced, and its directory
// fsynced) that the process using this store stopped cleanly: no write it
// forwarded can still reach the backend. Call it only then, after the proxy
// listener stopped and every admitted write finished, abandoned ones through
// their grace (fence.Barrier.WaitIdle). The next process's TakeCleanStop reads
// and removes it. Errors: ErrClosed after Close; file system errors.
func (s *Store) MarkCleanStop() error {
	if s.closed.Load() {
		return ErrClosed
	}
	// The directory must still be ours: one removed and made again under the
	// same path may be another process's store.
	if err := s.checkDir(); err != nil {
		return err
	}
	path := filepath.Join(s.dir, cleanStopFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("store/badger: mark a clean stop: %w", err)
	}
	_, werr := f.WriteString("fenceproxy stopped with no forwarded write unfinished; the next start removes this file\n")
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("store/badger: mark a clean stop: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("store/badger: mark a clean stop: %w", err)
	}
	return nil
}

// TakeCleanStop reports whether the previous process on this store stopped
// cleanly (MarkCleanStop), and removes the mark durably before returning, so
// that a crash of this process is never taken for a clean stop. Call it once,
// after Open and before forwarding any write. Errors: ErrClosed after Close
// (the directory may be another process's by then); file system errors
// (then treat the stop as unclean).
func (s *Store) TakeCleanStop() (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	path := filepath.Join(s.dir, cleanStopFile)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err == nil && !fi.Mode().IsRegular() {
		return false, fmt.Errorf("store/badger: %s is not a regular file; remove it", path)
	}
	if err == nil {
		err = os.Remove(path)
	}
	if err != nil {
		return false, fmt.Errorf("store/badger: remove the clean-stop mark: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return false, fmt.Errorf("store/badger: remove the clean-stop mark: %w", err)
	}
	return true, nil
}

// syncDir fsyncs a directory, making a file's creation or removal in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

package badger

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	badgerdb "github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// ErrNoSpace: the file system of the data directory has less free space than
// Options.MinFreeSpace. Raise, UpdateLease and Ready return it (wrapped with
// the free and required byte counts) and write nothing; they succeed again by
// themselves once space returns.
var ErrNoSpace = errors.New("store/badger: free space below the reserve")

// badgerHeadroom is the disk space Badger may still claim after raises stop
// (see badgerOptions). Badger writes through memory-mapped files: a write to
// a page that needs a new block on a full file system (tmpfs in particular)
// kills the process with SIGBUS instead of returning an error. It counts the flush of every
// memtable (Close flushes the active one too) to an L0 table of at most its
// size, and one L0->L1 compaction, which writes its output before deleting its
// input: up to NumLevelZeroTablesStall L0 tables plus BaseLevelSize of L1; plus
// 2 MiB for the DISCARD file (1 MiB) and the manifest. The memtable logs
// (.mem, 2 x MemTableSize each) and value-log files (2 x ValueLogFileSize) are
// sparse: their blocks are taken as records are written, which stops with the
// raises (8-byte values live in the LSM tree, so the value log stays nearly
// empty). With our options that is 16 + 32 + 10 + 2 = 60 MiB, so
// fenceproxy's default reserve of 128 MiB leaves a margin of two.
func badgerHeadroom(o badgerdb.Options) uint64 {
	flushes := int64(o.NumMemtables) * o.MemTableSize
	compaction := int64(o.NumLevelZeroTablesStall)*o.MemTableSize + o.BaseLevelSize
	return uint64(flushes + compaction + 2<<20)
}

// spaceGuard refuses writes while the data directory's file system has less
// than min bytes free, and logs entering and leaving that state once each.
type spaceGuard struct {
	dir    string
	min    uint64 // 0: no check
	statfs func(dir string) (free uint64, err error)
	log    *slog.Logger
	low    atomic.Bool // below the reserve at the last check
}

// freeSpace returns the bytes of dir's file system available to unprivileged
// users (statfs(2) f_bavail x f_bsize): a non-root fenceproxy cannot use the
// blocks ext4 reserves for root, so counting them would overstate its room.
func freeSpace(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

// check returns nil while at least min bytes are free, else an error wrapping
// ErrNoSpace; a failing statfs is an error too (fail closed).
//
// It runs one statfs per call and caches nothing: callers are about to fsync
// (one statfs costs microseconds, the fsync milliseconds), and without a cache
// a refusal starts at the first write below the reserve and recovery comes
// with the first call after space returns (Ready, polled by /readyz, notices
// it without traffic). Concurrent raises that all pass the check write one
// small record each (tens of bytes), far below the reserve.
func (g *spaceGuard) check() error {
	if g.min == 0 {
		return nil
	}
	free, err := g.statfs(g.dir)
	if err != nil {
		return fmt.Errorf("store/badger: free space of %s: %w", g.dir, err)
	}
	if free < g.min {
		if g.low.CompareAndSwap(false, true) {
			g.log.Warn("low on disk space: fence raises and lease changes fail until space returns",
				slog.String("data_dir", g.dir), slog.Uint64("free_bytes", free), slog.Uint64("min_free_space", g.min))
		}
		return fmt.Errorf("%w: %s has %d bytes free, the reserve is %d bytes", ErrNoSpace, g.dir, free, g.min)
	}
	if g.low.Load() && g.low.CompareAndSwap(true, false) {
		g.log.Info("disk space back above the reserve: fence raises and lease changes resume",
			slog.String("data_dir", g.dir), slog.Uint64("free_bytes", free), slog.Uint64("min_free_space", g.min))
	}
	return nil
}

// newSpaceGuard returns the guard of dir for opts and checks once, so that a
// store opened below its reserve logs so at start-up (before Badger opens:
// if Badger then dies of SIGBUS, the reason is in the log). It warns when the
// reserve is set below badgerHeadroom.
func newSpaceGuard(dir string, opts Options, log *slog.Logger) *spaceGuard {
	g := &spaceGuard{dir: dir, min: opts.MinFreeSpace, statfs: opts.statfs, log: log}
	if g.statfs == nil {
		g.statfs = freeSpace
	}
	if g.min == 0 {
		return g
	}
	if need := badgerHeadroom(badgerOptions(dir, nil)); g.min < need {
		log.Warn("the free-space reserve is smaller than what Badger may still write once raises stop; a full disk can then kill the process (SIGBUS)",
			slog.Uint64("min_free_space", g.min), slog.Uint64("badger_headroom", need))
	}
	_ = g.check() // logs when below the reserve; callers see it on use
	return g
}

// canOpen refuses to open Badger while the file system has less free space
// than Badger itself may write (its memtable files, a flush, a compaction):
// it writes through mmap and would die with SIGBUS, in a restart loop,
// rather than fail. Between that and the reserve the store opens and raises
// fail with ErrNoSpace. nil when no reserve is set.
func (g *spaceGuard) canOpen() error {
	if g.min == 0 {
		return nil
	}
	free, err := g.statfs(g.dir)
	if err != nil {
		return fmt.Errorf("store/badger: check free space in %s: %w", g.dir, err)
	}
	if need := min(g.min, badgerHeadroom(badgerOptions(g.dir, nil))); free < need {
		return fmt.Errorf("%w: %s has %d bytes free, and Badger may write up to %d on its own; not opening it (free some space and start again)", ErrNoSpace, g.dir, free, need)
	}
	return nil
}

// Package badger keeps the per-resource fencing-token maxima (high-water
// marks) of fenceproxy in an embedded Badger v4 database.
//
// A maximum only ever rises: Raise stores max(stored, t) in one read-modify-write
// transaction and returns only after the write is fsynced, so a token the proxy
// admitted survives a crash (Kleppmann 2016, "How to do distributed locking").
// Recently used maxima are answered from memory (a cache bounded in bytes, see
// Options.CacheBytes).
//
// One Store owns its directory: Open takes an exclusive flock on
// DATA_DIR/fenceproxy.lock, so two fenceproxy processes can never fence the
// same backend from diverging copies of the maxima.
//
// A prefix fence (a resource whose name ends in "/") with a maximum above 0
// also has an entry in an index of its own ("prefixes/" + resource), written
// in the transaction of every raise of it and deleted in Reset's, so that
// Prefixes never reads every record. A directory written before the index
// has no marker ("meta/prefix-index"): Open then builds the index once, from
// a scan of every fence record, and writes the marker. After an earlier
// version ran on a marked directory, delete the marker to build it again.
package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	badgerdb "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"golang.org/x/sys/unix"

	"github.com/fenceproxy/fenceproxy/store"
	"github.com/fenceproxy/fenceproxy/store/internal/groupcommit"
)

// The Badger store implements the whole storage contract.
var _ store.Store = (*Store)(nil)

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrLocked: the directory is held by another process (or another Store
	// in this process; flock locks belong to the open file, not the process).
	ErrLocked = errors.New("store/badger: data directory locked")
	// ErrClosed: the Store was used after Close.
	ErrClosed = errors.New("store/badger: store closed")
	// ErrDirGone: the data directory was removed or replaced under the
	// running store; raises fail (closed) since they would not survive a restart.
	ErrDirGone = errors.New("store/badger: data directory was removed or replaced")
	// ErrRange: a token above math.MaxInt64 (2^63-1), the largest token
	// fenceproxy accepts so Java, etcd and Redisson tokens all fit.
	ErrRange = errors.New("store/badger: token out of range (max 2^63-1)")
)

const (
	// lockFileName is the flock file Open creates in the data directory.
	lockFileName = "fenceproxy.lock"

	// keyPrefix namespaces fencing maxima so other record kinds (leases) can
	// share the database. Key = keyPrefix + resource; value = 8-byte
	// big-endian uint64.
	keyPrefix = "fence/"

	// maxRaiseAttempts bounds retries on badgerdb.ErrConflict. Every conflict
	// means another raise of the same resource committed, and a raise that
	// is already covered by it returns early, so this is rarely approached.
	maxRaiseAttempts = 100
)

// Options sizes the store; zero values get the documented defaults.
type Options struct {
	// Logger receives Badger's own log lines: its INFO as slog Debug,
	// WARNING as Warn, ERROR as Error (DEBUG as Debug-4, below Debug, since
	// Badger logs several DEBUG lines per write), and the store's own
	// low-space warnings. nil = discard.
	Logger *slog.Logger
	// MinFreeSpace is the free space in bytes that the data directory's file
	// system must keep (statfs: blocks available to unprivileged users).
	// Below it Raise, UpdateLease and Ready fail with ErrNoSpace, before
	// anything is written, until space returns; 0 = no check. See
	// badgerHeadroom for what Badger itself still needs.
	MinFreeSpace uint64
	// CacheBytes bounds the memory, in bytes, of the maxima kept in memory
	// (a maximum of 0 included), counting each by its name's length plus a
	// fixed overhead; past it, entries not used lately are evicted (CLOCK).
	// 0 = DefaultCacheBytes. A miss costs one Badger read.
	CacheBytes int64

	// statfs replaces freeSpace in tests, which fake a full disk.
	statfs func(dir string) (free uint64, err error)
}

// Store holds per-resource fencing-token maxima. It is safe for concurrent use.
type Store struct {
	dir      string
	db       *badgerdb.DB
	lockFile *os.File
	space    *spaceGuard
	open     *openSnapshot      // the store as it was at Open, for the start-up grace
	empty    bool               // no record at Open (EmptyAtOpen)
	raises   *groupcommit.Group // concurrent raises share a transaction and its sync
	cache    *maxCache          // recently used maxima; also what MarkWritten did

	// closed is checked without a lock on the cache fast path; mu keeps
	// Close from closing db under an in-flight disk operation.
	closed    atomic.Bool
	mu        sync.RWMutex
	closeOnce sync.Once
	closeErr  error

	// diskLoads counts Badger reads (Max misses and Raise transactions);
	// tests use it to prove cache hits do no disk I/O.
	diskLoads atomic.Uint64
	// loadedHook, when set (tests only), runs between a Max miss's disk
	// read and the caching of its value: the window eviction races.
	loadedHook func(resource string)
}

// Open opens (creating with mode 0o700 if missing) the store in dir, and
// builds the index of prefix fences if its marker is absent
// (buildPrefixIndex). It fails with an error wrapping ErrLocked when another
// fenceproxy process, or another Store in this process, holds dir.
func Open(dir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store/badger: create data directory: %w", err)
	}
	lf, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	space := newSpaceGuard(dir, opts, log)
	if err := space.canOpen(); err != nil {
		_ = lf.Close()
		return nil, err
	}
	db, err := badgerdb.Open(badgerOptions(dir, opts.Logger))
	if err != nil && emptyMemtable(err) {
		// A kill between Badger creating a memtable file and sizing it
		// leaves it empty; the failed Open sized it, so the next one works.
		// The file never held a write (dgraph-io/badger#2207).
		log.Warn("badger found an empty memtable file left by a crash; opening again", slog.String("error", err.Error()))
		db, err = badgerdb.Open(badgerOptions(dir, opts.Logger))
	}
	if err != nil {
		_ = lf.Close() // closing the file drops the flock
		return nil, fmt.Errorf("store/badger: open badger in %s: %w", dir, err)
	}
	empty, err := holdsNoRecord(db)
	if err != nil {
		_ = db.Close()
		_ = lf.Close()
		return nil, fmt.Errorf("store/badger: read %s: %w", dir, err)
	}
	if err := buildPrefixIndex(db); err != nil {
		_ = db.Close()
		_ = lf.Close()
		return nil, fmt.Errorf("store/badger: index the prefix fences of %s: %w", dir, err)
	}
	s := &Store{dir: dir, db: db, lockFile: lf, space: space, open: newOpenSnapshot(db), empty: empty,
		cache: newMaxCache(opts.CacheBytes)}
	s.raises = groupcommit.New(groupcommit.Upto(maxRaiseBatch), s.commitRaises)
	return s, nil
}

// holdsNoRecord reports whether db has no key at all (Badger's own are
// hidden from iterators) but pool records and the store's own (meta/): no
// maximum, no lease record.
func holdsNoRecord(db *badgerdb.DB) (empty bool, err error) {
	err = db.View(func(txn *badgerdb.Txn) error {
		opts := badgerdb.DefaultIteratorOptions
		opts.PrefetchValues = false
		it := txn.NewIterator(opts)
		defer it.Close()
		it.Rewind()
		for it.Valid() && (bytes.HasPrefix(it.Item().Key(), []byte(poolPrefix)) || bytes.HasPrefix(it.Item().Key(), []byte(metaPrefix))) {
			it.Next()
		}
		empty = !it.Valid()
		return nil
	})
	return empty, err
}

// EmptyAtOpen reports whether the store held no record when it was opened:
// no maximum and no lease record, as in a new data directory. Every write
// the proxy forwards has a durable record first (Raise, MarkWritten), so no
// write of an earlier process can still be in flight on such a store,
// whether or not that process left a clean-stop mark.
func (s *Store) EmptyAtOpen() bool { return s.empty }

// emptyMemtable reports badgerdb.Open's error for a zero-size .mem file. Badger
// formats the cause with %+v, so only its text is left to match.
func emptyMemtable(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "while opening memtables") && strings.Contains(msg, "Create a new file")
}

// lockDir takes an exclusive, non-blocking flock on dir/fenceproxy.lock.
// Badger keeps its own LOCK file too; ours comes first so the error names
// fenceproxy and can be matched with ErrLocked.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store/badger: open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is in use by another fenceproxy process (flock on %s is held)",
				ErrLocked, dir, path)
		}
		return nil, fmt.Errorf("store/badger: flock %s: %w", path, err)
	}
	// The PID is for operators only; the flock is what excludes.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// badgerOptions sizes Badger for a sidecar holding small 8-byte records.
func badgerOptions(dir string, logger *slog.Logger) badgerdb.Options {
	o := badgerdb.DefaultOptions(dir)
	// Durability is the point: a raise must be fsynced before the proxy
	// forwards the write it admits (default false).
	o.SyncWrites = true
	// Raise is a read-modify-write; conflict detection is what makes two
	// concurrent raises serialise (default true, set for clarity).
	o.DetectConflicts = true
	// Records are ~tens of bytes; 4 MiB memtables hold ~50k of them, or
	// ~3,000 of 1 KiB keys (default 64 MiB). A flush builds its table in
	// memory first, in buffers that double up to several times this size.
	o.MemTableSize = 4 << 20
	// Compactions build tables of this size, also in memory first (default
	// 2 MiB).
	o.BaseTableSize = 1 << 20
	// Two memtables (one active, one flushing) bound memory (default 5).
	o.NumMemtables = 2
	// Few, small L0 tables; compact early (defaults 5 and stall at 15).
	o.NumLevelZeroTables = 2
	o.NumLevelZeroTablesStall = 4
	// The working set is tiny and answered from our own cache (default 256 MiB).
	o.BlockCacheSize = 8 << 20
	// Bound table-index memory instead of keeping all indexes resident
	// (default 0 = unbounded).
	o.IndexCacheSize = 4 << 20
	// Values stay in the LSM tree, so value-log files stay near-empty
	// (default 1 GiB - 1; Badger's minimum is 1 MiB).
	o.ValueLogFileSize = 16 << 20
	// 8-byte values are always below this, so they live in the LSM tree next
	// to their keys (default 1 MiB).
	o.ValueThreshold = 1 << 10
	// Compressing 8-byte values buys nothing (default Snappy).
	o.Compression = options.None
	// Two is Badger's minimum non-zero count (default 4).
	o.NumCompactors = 2
	o.Logger = nil // Badger's default writes to stderr; nil silences it
	if logger != nil {
		o.Logger = slogAdapter{logger}
	}
	return o
}

func key(resource string) []byte {
	return []byte(keyPrefix + resource)
}

func decode(resource string, v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("store/badger: corrupt maximum for %q: %d bytes, want 8", resource, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func encode(t uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], t)
	return b[:]
}

// Max returns the stored fencing-token maximum of resource, 0 for a resource
// never raised. A recently used maximum is answered from memory, no disk I/O;
// otherwise it is read from Badger and cached.
// Errors: ErrClosed after Close; Badger read errors.
func (s *Store) Max(resource string) (uint64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if m, ok := s.cache.get(resource); ok {
		return m, nil
	}
	return s.load(resource)
}

// load reads resource's maximum from disk and caches it, under the load lock
// so that a raise committed during the read cannot be lowered (see maxCache).
func (s *Store) load(resource string) (uint64, error) {
	mu := s.cache.lockLoad(resource)
	defer mu.Unlock()
	if m, ok := s.cache.get(resource); ok {
		return m, nil // loaded by another caller while this one waited
	}
	var stored uint64
	err := s.withDB(func(db *badgerdb.DB) error {
		return db.View(func(txn *badgerdb.Txn) error {
			var err error
			stored, err = s.read(txn, resource)
			return err
		})
	})
	if err != nil {
		return 0, s.wrap("max", resource, err)
	}
	if s.loadedHook != nil {
		s.loadedHook(resource)
	}
	// A raise may have cached a larger value meanwhile; never lower it.
	return s.cache.raiseLocked(resource, stored), nil
}

// Raise makes max(stored, t) the durable maximum of resource and returns it
// (always >= t). t is a fencing token <= 2^63-1. The new maximum is fsynced
// before Raise returns; if t <= the stored maximum nothing is written.
// Concurrent raises are committed together (one transaction, one sync). See
// Kleppmann 2016, "How to do distributed locking".
// Errors: ErrRange when t > 2^63-1 (nothing written); ErrClosed after Close;
// ErrDirGone; ErrNoSpace below Options.MinFreeSpace (nothing written); Badger
// errors, including badgerdb.ErrConflict after too many retries.
func (s *Store) Raise(resource string, t uint64) (uint64, error) {
	if t > math.MaxInt64 {
		return 0, ErrRange
	}
	if s.closed.Load() {
		return 0, ErrClosed
	}
	// The cache only holds committed (fsynced) values, so a cached
	// maximum >= t already answers the raise.
	if m, ok := s.cache.get(resource); ok && m >= t {
		return m, nil
	}
	if err := s.checkDir(); err != nil {
		return 0, err
	}
	if err := s.space.check(); err != nil {
		return 0, err
	}
	return s.raises.Raise(resource, t)
}

// read loads resource's maximum inside txn; 0 when absent.
func (s *Store) read(txn *badgerdb.Txn, resource string) (uint64, error) {
	s.diskLoads.Add(1)
	item, err := txn.Get(key(resource))
	if errors.Is(err, badgerdb.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var m uint64
	err = item.Value(func(v []byte) error {
		var err error
		m, err = decode(resource, v)
		return err
	})
	return m, err
}

// withDB runs fn on the open database, or returns ErrClosed. Close waits for
// fn to finish before closing Badger.
func (s *Store) withDB(fn func(*badgerdb.DB) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return ErrClosed
	}
	return fn(s.db)
}

func (s *Store) wrap(op, resource string, err error) error {
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("store/badger: %s %q: %w", op, resource, err)
}

// Ready reports whether the store can serve: nil while open; ErrClosed after
// Close; ErrDirGone when the data directory was removed or replaced;
// ErrNoSpace while its file system is below Options.MinFreeSpace.
func (s *Store) Ready() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.checkDir(); err != nil {
		return err
	}
	return s.space.check()
}

// checkDir verifies that the lock file this store holds is still the one at
// its path: after `rm -rf DATA_DIR` Badger keeps writing to deleted files, and
// a second process could lock a new directory at the same path.
func (s *Store) checkDir() error {
	held, err := s.lockFile.Stat()
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDirGone, s.dir, err)
	}
	now, err := os.Stat(filepath.Join(s.dir, lockFileName))
	if err != nil || !os.SameFile(held, now) {
		return fmt.Errorf("%w: %s no longer holds this process's %s", ErrDirGone, s.dir, lockFileName)
	}
	return nil
}

// Close waits for in-flight disk operations, closes Badger (which flushes
// its memtables) and then releases the directory lock. It is idempotent and
// safe to call concurrently; every call returns the first call's result.
// Max and Raise return ErrClosed afterwards.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)    // new calls fail fast from here on
		s.ReleaseOpenSnapshot() // before s.mu: MaxAtOpen takes the snapshot's lock, then s.mu
		s.mu.Lock()
		defer s.mu.Unlock()
		err := s.db.Close()
		// Release only after Badger is closed so a successor never sees
		// a half-closed database.
		if lerr := s.lockFile.Close(); lerr != nil && err == nil {
			err = fmt.Errorf("store/badger: release lock: %w", lerr)
		}
		if err != nil {
			s.closeErr = fmt.Errorf("store/badger: close %s: %w", s.dir, err)
		}
	})
	return s.closeErr
}

// Resources returns how many resources with a maximum above 0 are held in
// memory now: loaded or raised by this process and not evicted since.
func (s *Store) Resources() int {
	return int(s.cache.positive.Load())
}

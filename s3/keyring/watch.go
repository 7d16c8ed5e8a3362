package keyring

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultEvery is how often Watch re-reads the file when every is 0 or less.
const DefaultEvery = 5 * time.Second

// MaxFileSize is the largest credentials file Watch reads (4 MiB, some
// tens of thousands of keys).
const MaxFileSize = 4 << 20

// Store is the credentials file as Watch keeps it: the keys of the last
// good version, swapped whole when the file changes. Its methods may be
// called from any goroutine; after Watch's ctx ends it keeps answering
// from the keys it had.
type Store struct {
	path  string
	every time.Duration
	log   *slog.Logger
	keys  atomic.Pointer[Keys]
	done  chan struct{}

	mu      sync.Mutex // guards loaded and lastErr
	loaded  time.Time
	lastErr error

	// The poller's own: the hash of the content read last (good or bad) and
	// the text of the failure logged last.
	sum     [sha256.Size]byte
	failure string
}

// Watch loads the credentials file at path (an error if it cannot be read
// or is not valid: see Parse) and then re-reads it every every (DefaultEvery
// when 0 or less) until ctx ends. When the content changed and is valid, the
// new keys replace the old in one step: a key added or removed (a grant
// changed, a secret rotated) takes effect at most every after the file
// changes, plus one read and parse. When the file cannot be read or is not
// valid, the last good keys stay, LastError says why, and log gets one error
// line per distinct failure (never a secret).
//
// The path is opened anew on each read, so a Kubernetes Secret volume (whose
// kubelet swaps the ..data symlink, itself some tens of seconds after the
// Secret changes) and a file replaced by rename both work. A writer that
// rewrites the file in place may be read half-written: such a file is
// refused and the next read takes the whole one. log may be nil.
func Watch(ctx context.Context, path string, every time.Duration, log *slog.Logger) (*Store, error) {
	if every <= 0 {
		every = DefaultEvery
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &Store{path: path, every: every, log: log, done: make(chan struct{}), loaded: time.Now(), sum: sha256.Sum256(data)}
	s.keys.Store(keys)
	log.Info("s3 credentials loaded", "path", path, "keys", keys.Len(), "reload_every", every.String())
	go s.run(ctx)
	return s, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxFileSize)
	}
	return data, nil
}

func (s *Store) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.reload()
		}
	}
}

// reload reads the file once and swaps the keys when it changed and parses.
func (s *Store) reload() {
	data, err := readFile(s.path)
	if err != nil {
		s.sum = [sha256.Size]byte{} // whatever comes back is parsed again
		s.fail(err)
		return
	}
	sum := sha256.Sum256(data)
	if sum == s.sum {
		return
	}
	s.sum = sum
	keys, err := Parse(data)
	if err != nil {
		s.fail(fmt.Errorf("%s: %w", s.path, err))
		return
	}
	old := s.keys.Swap(keys)
	s.mu.Lock()
	s.loaded, s.lastErr = time.Now(), nil
	s.mu.Unlock()
	if s.failure != "" {
		s.log.Info("s3 credentials file valid again", "path", s.path)
		s.failure = ""
	}
	added, removed := diff(old.IDs(), keys.IDs())
	s.log.Info("s3 credentials reloaded", "path", s.path, "keys", keys.Len(), "added", orNone(added), "removed", orNone(removed),
		"changed", orNone(changed(old, keys)))
}

// changed are the ids in both a and b whose secret or grants differ, sorted
// (ids only: never a secret).
func changed(a, b *Keys) []string {
	if a == nil || b == nil {
		return nil
	}
	var ids []string
	for _, id := range b.IDs() {
		ea, ok := a.byID[id]
		if eb := b.byID[id]; ok && (ea.secret != eb.secret || !slices.Equal(ea.grants, eb.grants)) {
			ids = append(ids, id)
		}
	}
	return ids
}

// orNone makes an empty list a list in the log ([] rather than null).
func orNone(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}

func (s *Store) fail(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
	if msg := err.Error(); msg != s.failure {
		s.failure = msg
		s.log.Error("s3 credentials file not loaded; the last good keys stay", "path", s.path, "keys", s.keys.Load().Len(), "error", err)
	}
}

// diff is what b has that a has not, and what a has that b has not (sorted
// inputs).
func diff(a, b []string) (added, removed []string) {
	for _, id := range b {
		if _, found := slices.BinarySearch(a, id); !found {
			added = append(added, id)
		}
	}
	for _, id := range a {
		if _, found := slices.BinarySearch(b, id); !found {
			removed = append(removed, id)
		}
	}
	return added, removed
}

// Keys is the current keys. A request that asks more than one question
// (Secret, then Allowed) asks them of one Keys, so that a reload between
// them cannot mix two versions of the file.
func (s *Store) Keys() *Keys { return s.keys.Load() }

// Secret is Keys().Secret.
func (s *Store) Secret(id string) (string, bool) { return s.Keys().Secret(id) }

// Allowed is Keys().Allowed.
func (s *Store) Allowed(id, bucket, key string, write bool) bool {
	return s.Keys().Allowed(id, bucket, key, write)
}

// AllowedList is Keys().AllowedList.
func (s *Store) AllowedList(id, bucket, listPrefix string) bool {
	return s.Keys().AllowedList(id, bucket, listPrefix)
}

// LastReload is when the current keys were loaded (Watch, or the last
// change of the file that parsed), for a timestamp gauge.
func (s *Store) LastReload() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded
}

// LastError is why the file's current content is not in use (unreadable or
// invalid; a *ValidationError for the latter, errors.As finds it), nil when
// the last read loaded or found the keys unchanged.
func (s *Store) LastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

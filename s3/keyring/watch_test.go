package keyring_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fenceproxy/fenceproxy/s3/keyring"
)

// logBuf is a slog JSON sink that tests read while the poller writes.
type logBuf struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed (and dropped) by each Write
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written != nil {
		close(l.written)
		l.written = nil
	}
	return l.b.Write(p)
}

// wait waits until cond holds, checking it at each line logged, for at most
// d; it reports whether cond holds.
func (l *logBuf) wait(d time.Duration, cond func() bool) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		l.mu.Lock()
		if l.written == nil {
			l.written = make(chan struct{})
		}
		written := l.written
		l.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-written:
		case <-timer.C:
			return cond()
		}
	}
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// count is how many lines hold s.
func (l *logBuf) count(s string) int { return strings.Count(l.String(), s) }

func newLog() (*slog.Logger, *logBuf) {
	b := &logBuf{}
	return slog.New(slog.NewJSONHandler(b, nil)), b
}

// file is a credentials file granting each id readwrite on reports/jobs/.
func file(ids ...string) string {
	var b strings.Builder
	b.WriteString("keys:\n")
	for _, id := range ids {
		b.WriteString(key(id, sec+"-"+id, okGrants))
	}
	return b.String()
}

// replace writes the file whole, as an editor or a config tool that renames
// does, so that no read sees it half-written.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func allowed(s *keyring.Store, id string) bool { return s.Allowed(id, "reports", "jobs/a", true) }

func checkNoSecret(t *testing.T, logs *logBuf) {
	t.Helper()
	if strings.Contains(logs.String(), marker) {
		t.Fatalf("a log line holds a secret:\n%s", logs)
	}
}

// In a synctest bubble time moves only when every goroutine waits, so
// "at most every after the change" is checked exactly.
func TestWatchRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		path := filepath.Join(t.TempDir(), "credentials.yaml")
		replace(t, path, file("worker1", "worker2"))
		log, logs := newLog()
		s, err := keyring.Watch(ctx, path, 0, log) // 0: DefaultEvery
		if err != nil {
			t.Fatal(err)
		}
		start := s.LastReload()
		if !allowed(s, "worker1") || !allowed(s, "worker2") || allowed(s, "worker3") {
			t.Fatal("the first keys are not in use")
		}
		if got, ok := s.Secret("worker2"); !ok || got != sec+"-worker2" {
			t.Fatal("Secret(worker2) missing")
		}

		// The worst case: the file changes just after a read.
		time.Sleep(keyring.DefaultEvery) // fake time: a read is due
		synctest.Wait()
		time.Sleep(time.Nanosecond) // fake time: just after that read
		replace(t, path, file("worker1", "worker3"))
		changed := time.Now()
		time.Sleep(keyring.DefaultEvery - 2*time.Nanosecond) // fake time: just before the next read
		synctest.Wait()
		if !allowed(s, "worker2") {
			t.Fatal("reloaded before a read was due")
		}
		time.Sleep(time.Nanosecond) // fake time: the next read is due
		synctest.Wait()
		if allowed(s, "worker2") {
			t.Fatalf("worker2 still allowed %v after it was removed (every %v)", time.Since(changed), keyring.DefaultEvery)
		}
		t.Logf("worker2 refused %v after its removal (every %v)", time.Since(changed), keyring.DefaultEvery)
		if _, ok := s.Secret("worker2"); ok {
			t.Fatal("Secret(worker2) still found")
		}
		if !allowed(s, "worker3") || !allowed(s, "worker1") {
			t.Fatal("worker3 not added or worker1 lost")
		}
		if !s.LastReload().After(start) || s.LastError() != nil {
			t.Fatalf("LastReload %v (start %v), LastError %v", s.LastReload(), start, s.LastError())
		}
		if logs.count(`"msg":"s3 credentials reloaded"`) != 1 || logs.count(`"added":["worker3"],"removed":["worker2"]`) != 1 {
			t.Fatalf("logs:\n%s", logs)
		}

		// Content unchanged: no reload.
		at := s.LastReload()
		time.Sleep(3 * keyring.DefaultEvery) // fake time, asserting nothing happens: three reads, no reload
		synctest.Wait()
		if s.LastReload() != at || logs.count("reloaded") != 1 {
			t.Fatalf("an unchanged file was loaded again:\n%s", logs)
		}

		// A rotated secret adds and removes no id: the log names the key as
		// changed, never the secret.
		replace(t, path, strings.Replace(file("worker1", "worker3"), sec+"-worker1", sec+"-worker1-rotated", 1))
		time.Sleep(keyring.DefaultEvery) // fake time: a read is due
		synctest.Wait()
		if got, _ := s.Secret("worker1"); got != sec+"-worker1-rotated" {
			t.Fatal("worker1's new secret not in use")
		}
		if logs.count(`"added":[],"removed":[],"changed":["worker1"]`) != 1 {
			t.Fatalf("the rotation is not logged as a change of worker1:\n%s", logs)
		}
		checkNoSecret(t, logs)
	})
}

func TestWatchBrokenFileKeepsTheLastGoodKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		const every = time.Second
		path := filepath.Join(t.TempDir(), "credentials.yaml")
		replace(t, path, file("worker1"))
		log, logs := newLog()
		s, err := keyring.Watch(ctx, path, every, log)
		if err != nil {
			t.Fatal(err)
		}
		loaded := s.LastReload()
		step := func(what string) {
			t.Helper()
			time.Sleep(every) // fake time: one read is due
			synctest.Wait()
			if !allowed(s, "worker1") {
				t.Fatalf("%s: the last good keys were dropped", what)
			}
			if s.LastReload() != loaded {
				t.Fatalf("%s: LastReload moved", what)
			}
		}
		const failed = `"msg":"s3 credentials file not loaded; the last good keys stay"`

		// Invalid: a bad access, and worker2 that would be added with it.
		replace(t, path, file("worker1")+key("worker2", sec, "[{bucket: reports, access: rw}]"))
		step("invalid")
		if allowed(s, "worker2") {
			t.Fatal("a key of an invalid file is in use")
		}
		var ve *keyring.ValidationError
		if err := s.LastError(); !errors.As(err, &ve) || !strings.Contains(err.Error(), `keys[1].grants[0].access: "rw" is not read, write or readwrite`) {
			t.Fatalf("LastError = %v", err)
		}
		for range 5 {
			step("still invalid")
		}
		if n := logs.count(failed); n != 1 {
			t.Fatalf("%d error lines for one failure, want 1:\n%s", n, logs)
		}

		// Another failure: the file is gone. Then half-written (empty).
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		step("removed")
		step("still removed")
		if err := s.LastError(); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("LastError = %v, want not exist", err)
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		step("empty")
		step("still empty")
		if n := logs.count(failed); n != 3 {
			t.Fatalf("%d error lines for three failures, want 3:\n%s", n, logs)
		}
		if !strings.Contains(s.LastError().Error(), "the file is empty") {
			t.Fatalf("LastError = %v", s.LastError())
		}

		// Valid again: loaded, the error cleared.
		replace(t, path, file("worker2"))
		time.Sleep(every) // fake time: a read is due
		synctest.Wait()
		if allowed(s, "worker1") || !allowed(s, "worker2") || s.LastError() != nil || !s.LastReload().After(loaded) {
			t.Fatalf("the valid file was not loaded: LastError %v", s.LastError())
		}
		if logs.count(`"msg":"s3 credentials file valid again"`) != 1 {
			t.Fatalf("logs:\n%s", logs)
		}
		checkNoSecret(t, logs)
	})
}

func TestWatchStart(t *testing.T) {
	dir := t.TempDir()
	if _, err := keyring.Watch(t.Context(), filepath.Join(dir, "none.yaml"), time.Second, nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
	path := filepath.Join(dir, "bad.yaml")
	replace(t, path, "keys:\n"+key("worker1", marker+"short", okGrants))
	_, err := keyring.Watch(t.Context(), path, time.Second, nil)
	var ve *keyring.ValidationError
	if !errors.As(err, &ve) || strings.Contains(err.Error(), marker) || !strings.Contains(err.Error(), "keys[0].secret_access_key: shorter than 16") {
		t.Fatalf("an invalid file: %v", err)
	}
	replace(t, path, strings.Repeat("#", keyring.MaxFileSize+1))
	if _, err := keyring.Watch(t.Context(), path, time.Second, nil); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("a large file: %v", err)
	}
}

// kubeSecret lays out a Secret volume as the kubelet does (pkg/volume/util's
// AtomicWriter): the file is a symlink to ..data/{name}, ..data a symlink
// to a timestamped directory; an update writes a new directory, points a
// new symlink at it and renames that over ..data, then removes the old one.
type kubeSecret struct {
	dir string
	n   int
}

func (k *kubeSecret) write(t *testing.T, content string) {
	t.Helper()
	k.n++
	ts := filepath.Join(k.dir, "..2025_06_01_12_00_00."+string(rune('0'+k.n)))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "credentials.yaml"), []byte(content), 0o400); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(k.dir, "..data"))
	if err := os.Symlink(filepath.Base(ts), filepath.Join(k.dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(k.dir, "..data_tmp"), filepath.Join(k.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if k.n == 1 {
		if err := os.Symlink("..data/credentials.yaml", filepath.Join(k.dir, "credentials.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(k.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// Real time: the ticker and the file system as the proxy will see them.
func TestWatchKubernetesSecretVolume(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const every, margin = 50 * time.Millisecond, 2 * time.Second
	k := &kubeSecret{dir: t.TempDir()}
	k.write(t, file("worker1", "worker2"))
	log, logs := newLog()
	s, err := keyring.Watch(ctx, filepath.Join(k.dir, "credentials.yaml"), every, log)
	if err != nil {
		t.Fatal(err)
	}
	for i, ids := range [][]string{{"worker1"}, {"worker1", "worker3"}, {"worker3"}} {
		k.write(t, file(ids...))
		changed := time.Now()
		// The poller logs each reload after the swap.
		if !logs.wait(every+margin, func() bool { return strings.Join(s.Keys().IDs(), ",") == strings.Join(ids, ",") }) {
			t.Fatalf("update %d: keys %q, want %q, %v after the swap", i, s.Keys().IDs(), ids, time.Since(changed))
		}
		t.Logf("update %d in effect after %v (every %v)", i, time.Since(changed).Round(time.Millisecond), every)
	}
	if allowed(s, "worker2") || allowed(s, "worker1") || !allowed(s, "worker3") {
		t.Fatal("the last update is not in use")
	}
	if s.LastError() != nil || logs.count(`"level":"ERROR"`) != 0 {
		t.Fatalf("a symlink swap was seen as a failure: %v\n%s", s.LastError(), logs)
	}
	checkNoSecret(t, logs)
}

// Requests read the keys while the file changes under them as fast as the
// poller can read it; -race checks the swap, and each snapshot must be one
// whole version of the file.
func TestWatchConcurrentReads(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	path := filepath.Join(t.TempDir(), "credentials.yaml")
	versions := []string{file("worker1", "a1", "a2"), file("worker2", "b1", "b2")}
	replace(t, path, versions[0])
	s, err := keyring.Watch(ctx, path, time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var seen [2]atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				k := s.Keys()
				a, b := k.Allowed("worker1", "reports", "jobs/x", false), k.Allowed("worker2", "reports", "jobs/x", false)
				_, sa := k.Secret("a2")
				_, sb := k.Secret("b2")
				switch {
				case a && !b && sa && !sb && k.AllowedList("a1", "reports", "jobs/"):
					seen[0].Add(1)
				case b && !a && sb && !sa && k.AllowedList("b1", "reports", "jobs/"):
					seen[1].Add(1)
				default:
					t.Errorf("a snapshot mixes versions: %q", k.IDs())
					return
				}
				s.Allowed("worker1", "reports", "jobs/x", true)
				s.AllowedList("worker2", "reports", "")
				s.Secret("worker1")
				_ = s.LastReload()
				_ = s.LastError()
			}
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for i := 1; i <= 40 || seen[0].Load() == 0 || seen[1].Load() == 0; i++ {
		if time.Now().After(deadline) {
			t.Errorf("after %d changes readers saw version 0 %d times, version 1 %d times", i, seen[0].Load(), seen[1].Load())
			break
		}
		replace(t, path, versions[i%2])
		time.Sleep(3 * time.Millisecond) // paces the load: a change every 3 ms
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("snapshots of version 0: %d, of version 1: %d", seen[0].Load(), seen[1].Load())
}

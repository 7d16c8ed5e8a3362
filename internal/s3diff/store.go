package s3diff

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/s3backend"
)

// Kind is what a snapshot item is.
type Kind int

const (
	Bucket   Kind = iota // a bucket: its configuration
	Object               // an object, as the store names it
	Internal             // the store's own state (multipart staging, ...)
)

// Item is one thing a store holds, as read from the store itself.
type Item struct {
	Kind        Kind
	Bucket, Key string // Key as the store names the object; "" for a bucket
	State       string // opaque: two snapshots' states are equal iff it did not change
	Content     []byte // an object's data, at most maxContent bytes
}

const maxContent = 1 << 20

// Snapshot is a store's state: its items by path ("bkt", "bkt/key", ...).
type Snapshot map[string]Item

// Changed returns the paths whose items differ between s and after (new,
// changed or gone), sorted.
func (s Snapshot) Changed(after Snapshot) []string {
	var out []string
	for p, a := range after {
		if b, ok := s[p]; !ok || b.State != a.State {
			out = append(out, p)
		}
	}
	for p := range s {
		if _, ok := after[p]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Item returns the item of path in s or, if it is gone, in before.
func item(before, after Snapshot, path string) Item {
	if it, ok := after[path]; ok {
		return it
	}
	return before[path]
}

// PosixSnapshot reads versitygw's posix backend directory: a directory per
// bucket (its extended attributes are the bucket's configuration), a file
// per object and a directory with attributes per directory object ("d/"),
// the object's metadata, tags, ACL, retention and legal hold in extended
// attributes, and multipart uploads in progress below .sgwtmp (internal).
func PosixSnapshot(t testing.TB, root string) Snapshot {
	t.Helper()
	snap := Snapshot{}
	buckets, err := os.ReadDir(root)
	if err != nil {
		t.Fatalf("reading the store's directory: %v", err)
	}
	for _, b := range buckets {
		if !b.IsDir() || strings.HasPrefix(b.Name(), ".") {
			continue
		}
		bucket := b.Name()
		dir := filepath.Join(root, bucket)
		snap[bucket] = Item{Kind: Bucket, Bucket: bucket, State: xattrs(t, dir)}
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			if rel == "." {
				return nil
			}
			rel = filepath.ToSlash(rel)
			attrs := xattrs(t, path)
			if strings.HasPrefix(rel, ".sgwtmp") {
				state := attrs
				if !d.IsDir() {
					state += contentHash(t, path)
				}
				snap[bucket+"/"+rel] = Item{Kind: Internal, Bucket: bucket, Key: rel, State: state}
				return nil
			}
			if d.IsDir() {
				// An implicit directory (made for a deeper key) is no object.
				if attrs != "" {
					snap[bucket+"/"+rel+"/"] = Item{Kind: Object, Bucket: bucket, Key: rel + "/", State: "dir " + attrs}
				}
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			snap[bucket+"/"+rel] = Item{Kind: Object, Bucket: bucket, Key: rel, State: hex.EncodeToString(sum[:]) + " " + attrs,
				Content: data[:min(len(data), maxContent)]}
			return nil
		})
		if err != nil {
			t.Fatalf("walking bucket %s: %v", bucket, err)
		}
	}
	return snap
}

// xattrs returns a path's user.* extended attributes, sorted, as one string.
func xattrs(t testing.TB, path string) string {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := syscall.Listxattr(path, buf)
	if err != nil {
		if err == syscall.ENOENT {
			return ""
		}
		t.Fatalf("listxattr %s: %v", path, err)
	}
	var names []string
	for name := range strings.SplitSeq(string(buf[:n]), "\x00") {
		if name != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	val := make([]byte, 1<<20)
	for _, name := range names {
		m, err := syscall.Getxattr(path, name, val)
		if err != nil {
			continue
		}
		b.WriteString(name)
		b.WriteByte('=')
		b.Write(val[:m])
		b.WriteByte(';')
	}
	return b.String()
}

func contentHash(t testing.TB, path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "unreadable"
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// SeaweedSnapshot reads SeaweedFS's filer (s3backend.Seaweed.Entries): a
// directory per bucket, a file per object, a directory with a content type,
// attributes or data of its own per directory marker ("d/"), the object's
// metadata, tags, ACL, retention and legal hold in its extended attributes,
// and multipart uploads below the bucket's .uploads (internal). A file's
// data is read through the filer when it is at most 64 KiB.
func SeaweedSnapshot(t testing.TB, sw *s3backend.Seaweed) Snapshot {
	t.Helper()
	snap := Snapshot{}
	for path, e := range sw.Entries(t) {
		bucket, rel, _ := strings.Cut(path, "/")
		switch {
		case strings.HasPrefix(bucket, "."): // SeaweedFS's own (.system)
		case rel == "":
			snap[bucket] = Item{Kind: Bucket, Bucket: bucket, State: e.Raw}
		case rel == ".uploads" || strings.HasPrefix(rel, ".uploads/"):
			snap[path] = Item{Kind: Internal, Bucket: bucket, Key: rel, State: e.Raw}
		case e.Dir:
			// An implicit directory (made for a deeper key) is no object.
			if e.Mime != "" || len(e.Extended) > 0 || e.Size > 0 {
				snap[path+"/"] = Item{Kind: Object, Bucket: bucket, Key: rel + "/", State: e.Raw}
			}
		default:
			it := Item{Kind: Object, Bucket: bucket, Key: rel, State: e.Raw}
			if e.Size <= 64<<10 {
				it.Content = sw.Read(t, path)
			}
			snap[path] = it
		}
	}
	return snap
}

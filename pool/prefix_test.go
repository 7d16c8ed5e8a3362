package pool

import (
	"errors"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/fence"
)

// The prefix template's rules: {shard} once, a final "/", no leading "/"
// nor "//", at most MaxPrefix bytes; "" is no prefix.
func TestCheckPrefix(t *testing.T) {
	for _, ok := range []string{"", "reports/daily/{shard}/", "{shard}/", "out/part-{shard}/", "a/{shard}/b/", "a/{shard}-x/"} {
		if err := CheckPrefix(ok); err != nil {
			t.Errorf("CheckPrefix(%q) = %v, want nil", ok, err)
		}
		if _, err := (Spec{Shards: 2, Prefix: ok}).Check(); err != nil {
			t.Errorf("Spec with prefix %q: %v", ok, err)
		}
	}
	for bad, why := range map[string]string{
		"reports/daily/":                       "exactly once, found 0",
		"r/{shard}/{shard}/":                   "exactly once, found 2",
		"reports/{shard}":                      `ends in "/"`,
		"/reports/{shard}/":                    "leading",
		"reports//{shard}/":                    "empty segment",
		strings.Repeat("a", 600) + "/{shard}/": "at most",
		"u%2F{shard}/":                         "percent-encoded", // would name a fence no path reaches
		`bkt/p\{shard}/`:                       "percent-encoded",
	} {
		err := CheckPrefix(bad)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), why) {
			t.Errorf("CheckPrefix(%q) = %v, want ErrInvalid saying %q", bad, err, why)
		}
		if _, err := (Spec{Shards: 2, Prefix: bad}).Check(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Spec with prefix %q: %v, want ErrInvalid", bad, err)
		}
	}
}

// ShardName substitutes the shard once; without a prefix it is
// "{pool}/{shard}"; shardOf inverts it for valid shard names only.
func TestShardName(t *testing.T) {
	for _, c := range []struct{ pool, prefix, shard, want string }{
		{"p", "", "3", "p/3"},
		{"p", "reports/daily/{shard}/", "3", "reports/daily/3/"},
		{"p", "out/part-{shard}/", "a.b", "out/part-a.b/"},
		{"p", "{shard}/", "x", "x/"},
	} {
		got := ShardName(c.pool, c.prefix, c.shard)
		if got != c.want {
			t.Errorf("ShardName(%q, %q, %q) = %q, want %q", c.pool, c.prefix, c.shard, got, c.want)
		}
		if s, ok := shardOf(c.pool, c.prefix, got); !ok || s != c.shard {
			t.Errorf("shardOf(%q) = %q, %v; want %q", got, s, ok, c.shard)
		}
	}
	for _, name := range []string{"reports/daily/3", "reports/daily/3/x/", "reports/daily//", "reports/3/", "reports/daily/../"} {
		if s, ok := shardOf("p", "reports/daily/{shard}/", name); ok {
			t.Errorf("shardOf(%q) = %q, want none", name, s)
		}
	}
}

// A pool with a prefix claims, lists, renews (HandBack) and marks done on
// the prefix names; "{pool}/{shard}" is then an ordinary lease; a new
// process finds the pool of a prefix name from the store.
func TestPoolPrefixNames(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 2, Prefix: "reports/daily/{shard}/"})
	c := r.claim("p", "w1")
	want := "reports/daily/" + c.Shard + "/"
	if c.Lease.Name != want {
		t.Fatalf("claim's lease %q, want %q", c.Lease.Name, want)
	}
	if !fence.IsPrefix(c.Lease.Name) {
		t.Fatalf("claim's lease %q is no prefix fence", c.Lease.Name)
	}
	st, err := r.p.Status("p")
	if err != nil || st.Prefix != "reports/daily/{shard}/" {
		t.Fatalf("Status: %+v, %v", st, err)
	}
	for _, sh := range st.Shards {
		if sh.Name != "reports/daily/"+sh.Shard+"/" {
			t.Errorf("status shard %q named %q", sh.Shard, sh.Name)
		}
		if sh.Shard == c.Shard && (sh.State != StateHeld || sh.Holder != "w1" || sh.Token != c.Lease.Token) {
			t.Errorf("status of the claimed shard: %+v", sh)
		}
	}
	// w1's renew of its prefix name is a pool shard's; "p/{shard}" is not.
	for name, wantShard := range map[string]string{want: c.Shard, "p/" + c.Shard: "", "reports/daily/zz/": "", "reports/daily/" + c.Shard: ""} {
		pl, sh, _, err := r.p.HandBack(name, "w1")
		if err != nil || (wantShard == "") != (pl == "") || sh != wantShard {
			t.Errorf("HandBack(%q) = %q, %q, %v; want shard %q", name, pl, sh, err, wantShard)
		}
	}
	fresh := New(r.store, r.m, Events{}) // a new process: the index of prefixed pools comes from the store
	if pl, sh, _, err := fresh.HandBack(want, "w1"); err != nil || pl != "p" || sh != c.Shard {
		t.Errorf("HandBack(%q) after a restart = %q, %q, %v", want, pl, sh, err)
	}
	name, err := r.p.Done("p", c.Shard, "w1", c.Lease.Token)
	if err != nil || name != want {
		t.Fatalf("Done = %q, %v; want %q", name, err, want)
	}
	if l, _, err := r.m.Get(want); err != nil || !l.Released {
		t.Errorf("the shard's prefix lease after done: %+v, %v; want released", l, err)
	}
}

// Changing the prefix renames every shard's lease: refused (ErrBusy, naming
// both prefixes and the held shards) while a shard is held; once they are
// released it passes and claims get the new names. Without a prefix change
// a redefinition over held shards passes as before.
func TestPoolPrefixChangeWhileHeld(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 2})
	c := r.claim("p", "w1")
	if c.Lease.Name != "p/"+c.Shard {
		t.Fatalf("claim without a prefix: %q", c.Lease.Name)
	}
	_, err := r.p.Define("p", Spec{Shards: 2, Prefix: "out/{shard}/"})
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), `"out/{shard}/"`) || !strings.Contains(err.Error(), c.Shard) {
		t.Fatalf("a prefix change over a held shard: %v, want ErrBusy naming the prefix and shard %s", err, c.Shard)
	}
	r.define("p", Spec{Shards: 2}) // the same prefix: nothing renamed
	if _, err := r.m.Release(c.Lease.Name, "w1", c.Lease.Token); err != nil {
		t.Fatal(err)
	}
	r.define("p", Spec{Shards: 2, Prefix: "out/{shard}/"})
	c2 := r.claim("p", "w1")
	if c2.Lease.Name != "out/"+c2.Shard+"/" {
		t.Fatalf("claim after the prefix change: %q", c2.Lease.Name)
	}
	// and back, while held: refused again.
	if _, err := r.p.Define("p", Spec{Shards: 2}); !errors.Is(err, ErrBusy) {
		t.Fatalf("dropping the prefix over a held shard: %v, want ErrBusy", err)
	}
	// A shrink keeps its old rule: the kept shards may be held.
	if _, err := r.m.Release(c2.Lease.Name, "w1", c2.Lease.Token); err != nil {
		t.Fatal(err)
	}
	c3 := r.claim("p", "w1")
	keep := []string{c3.Shard}
	r.define("p", Spec{Names: keep, Prefix: "out/{shard}/"})
}

// Two pools' lease names must not meet: the same name, or one a prefix
// fence above the other, in either order of definition.
func TestPoolPrefixOverlap(t *testing.T) {
	r := newRig(t)
	r.define("a", Spec{Shards: 2, Prefix: "out/{shard}/"})
	for _, c := range []struct {
		pool string
		spec Spec
	}{
		{"b", Spec{Shards: 1, Prefix: "out/{shard}/"}},              // out/0/: a's own
		{"b", Spec{Names: []string{"x"}, Prefix: "out/0/{shard}/"}}, // out/0/x/: below a's out/0/
		{"b", Spec{Names: []string{"out"}, Prefix: "{shard}/"}},     // out/: above a's
	} {
		if _, err := r.p.Define(c.pool, c.spec); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `pool "a"`) {
			t.Errorf("Define(%s, %+v) = %v, want ErrInvalid naming pool a", c.pool, c.spec, err)
		}
	}
	// "{pool}/{shard}" names below another pool's prefix, defined after it
	// and before it.
	r.define("top", Spec{Names: []string{"q"}, Prefix: "{shard}/"})
	if _, err := r.p.Define("q", Spec{Shards: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("pool q (q/0) below top's q/: %v, want ErrInvalid", err)
	}
	r.define("z", Spec{Shards: 1})
	if _, err := r.p.Define("top", Spec{Names: []string{"q", "z"}, Prefix: "{shard}/"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("top's z/ above pool z's z/0: %v, want ErrInvalid", err)
	}
	// Beside, not below: out/0 and out/0-x/ are not under out/0/.
	r.define("out", Spec{Shards: 1})
	r.define("c", Spec{Names: []string{"0-x"}, Prefix: "out/{shard}/"})
	// Redefining a pool is not an overlap with itself.
	r.define("a", Spec{Shards: 3, Prefix: "out/{shard}/"})
}

// A pool record written before prefixes (no "prefix") loads as before: its
// shards' leases are "{pool}/{shard}".
func TestPoolRecordWithoutPrefix(t *testing.T) {
	r := newRig(t)
	if err := r.store.UpdatePool("old", func([]byte) ([]byte, error) {
		return []byte(`{"shards":["0","1"],"done":{"1":7},"done_by":{"1":"w0"}}`), nil
	}); err != nil {
		t.Fatal(err)
	}
	c := r.claim("old", "w1")
	if c.Shard != "0" || c.Lease.Name != "old/0" {
		t.Fatalf("claim in an old record's pool: %+v", c)
	}
	if pl, sh, _, err := r.p.HandBack("old/0", "w1"); err != nil || pl != "old" || sh != "0" {
		t.Errorf("HandBack(old/0) = %q, %q, %v", pl, sh, err)
	}
	st, err := r.p.Status("old")
	if err != nil || st.Prefix != "" || st.Done != 1 || st.Shards[0].Name != "old/0" {
		t.Errorf("Status: %+v, %v", st, err)
	}
	raw, err := r.store.Pool("old")
	if err != nil || strings.Contains(string(raw), "prefix") {
		t.Errorf("record %s, %v: want no prefix field written", raw, err)
	}
}

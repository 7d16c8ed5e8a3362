// Package pool dispatches the shards of a pool to the holders that ask for
// work (issue 16): a pool is a durable set of shard names; a holder claims
// one shard at a time and gets a lease on it, with the lease's fencing token,
// fence-ahead and barrier (a claim is lease.Manager.Acquire on the shard's
// lease name, ShardName: "{pool}/{shard}", or with the pool's prefix
// template the template with {shard} replaced, a prefix fence such as
// "reports/daily/3/" whose token fences every key below it). Renew, release
// and force-release are the lease calls on that name.
//
// Assignment is sticky (a claim gets first the free shard whose lease its
// holder held last, then the free shard that ranks highest for it by
// rendezvous hashing of holder and shard, so restarts do not reshuffle
// everything) and fair (a holder never claims beyond its share, the ceiling
// of the pool's open shards over its live holders). When a holder joins, the
// holders above their share are told which shards to hand back (HandBack,
// carried by their renew answers); they release them after their current
// write and the newcomer's next claim gets them at once. Expiry is for
// failures.
//
// A live holder is one with a lease on a shard of the pool that is held,
// suspect or in its grace, or one that found no shard free at its last
// claim within half the claim's TTL (it waits: it is recorded in the
// pool's record, so the others' shares already make room for it).
//
// One-shot tasks: Done marks a shard complete with its holder's token; it is
// never dispatched again, and a stale token is refused.
//
// A claim may ask to stand by for a suspect shard when none is free: it is
// then first in line for it once its lease and grace end. The reservation
// lapses at the suspect lease's grace end plus the claim's TTL, and at the
// latest the claim's TTL plus that TTL's grace after the claim (a dead
// standby blocks a shard no longer than a dead holder would); a standby
// that claims again renews it.
//
// A claim's holder and TTL are checked with the lease manager's rules
// (lease.Manager.Check) before anything else: a claim that an acquire would
// refuse changes nothing.
//
// Durable state: the pool's record (definition, done marks, waiting holders,
// standbys) is a record kind of its own in the store (Store.UpdatePool), and
// each shard's lease is an ordinary lease record. The calls of one pool must
// run in one process (Pools serialises them); renew answers (HandBack) read
// the store only.
package pool

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
)

// Store is what pools need from durable storage (the stores under
// store/ provide it: Badger, etcd, memory).
type Store interface {
	// UpdatePool runs fn over pool's record (nil: none) and durably commits
	// fn's next record (nil: leave it) in one atomic step; fn's error comes
	// back as is.
	UpdatePool(pool string, fn func(record []byte) (next []byte, err error)) error
	// Pool returns pool's record, nil when there is none.
	Pool(pool string) ([]byte, error)
	// EachPool calls fn with every pool record, in name order.
	EachPool(fn func(pool string, record []byte) error) error
}

// Leases is what pools need of the lease manager (lease.Manager provides it).
type Leases interface {
	Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Lease, error)
	Release(name, holder string, token uint64) (lease.Lease, error)
	List(prefix, after string, limit int) ([]lease.Entry, error)
	GraceEnds(l lease.Lease) time.Time
	Now() time.Time
	// Check applies Acquire's rules for holder and ttl (lease.ErrInvalid).
	Check(holder string, ttl time.Duration) error
}

var (
	// ErrNotFound: no such pool, or no such shard in it (404).
	ErrNotFound = errors.New("no such pool or shard")
	// ErrInvalid: a bad definition or request (400).
	ErrInvalid = errors.New("invalid pool request")
	// ErrBusy: a shrink would remove shards that are not free, or a
	// prefix change would rename shards that are not free (409).
	ErrBusy = errors.New("pool shards to remove or rename are not free")
	// ErrDone: the shard was marked done with another token (409).
	ErrDone = errors.New("shard is already done")
)

// NoShardError is a claim's answer when no shard can be given now: the
// holder is at its share, or none is free. It matches ErrNoShard.
type NoShardError struct {
	AllDone bool      // every shard of the pool is done: nothing will ever be dispatched (Share and Held 0)
	AtShare bool      // the holder holds its share already
	Share   int       // the share: ceil(open shards / live holders)
	Held    int       // shards the holder holds
	RetryAt time.Time // earliest moment a shard may free up (a lease's grace end); zero: unknown
	Standby string    // the shard this holder stands by for ("": none)
}

// ErrNoShard is matched by *NoShardError (409 with Retry-After).
var ErrNoShard = errors.New("no shard can be claimed now")

func (e *NoShardError) Error() string {
	switch {
	case e.AllDone:
		return "every shard of the pool is done"
	case e.AtShare:
		return fmt.Sprintf("holder holds %d shards, its share is %d", e.Held, e.Share)
	case e.Standby != "":
		return fmt.Sprintf("no shard is free; standing by for suspect shard %q", e.Standby)
	case !e.RetryAt.IsZero():
		return fmt.Sprintf("no shard is free; the earliest may free up at %s", e.RetryAt.Format(time.RFC3339Nano))
	}
	return "no shard is free"
}

// Is makes errors.Is(err, ErrNoShard) hold.
func (e *NoShardError) Is(target error) bool { return target == ErrNoShard }

// Spec defines a pool: Shards (shards "0".."Shards-1") or Names, not both;
// optionally Prefix, the template of its shards' lease names.
type Spec struct {
	Shards int      `json:"shards,omitempty"`
	Names  []string `json:"names,omitempty"`
	// Prefix, when set, is a template holding ShardPlaceholder once and
	// ending in "/" ("reports/daily/{shard}/"): each shard's lease name is
	// the template with the shard's name in place of the placeholder, a
	// prefix fence, so a claim's token fences every key below the shard's
	// prefix. "": the lease name is "{pool}/{shard}" (CheckPrefix).
	Prefix string `json:"prefix,omitempty"`
}

// ShardPlaceholder is what a prefix template's shard name replaces.
const ShardPlaceholder = "{shard}"

// MaxPrefix bounds a prefix template's length in bytes (S3 keys are at most
// 1,024 bytes: the objects below a shard's prefix need room of their own).
const MaxPrefix = 512

// MaxShards bounds a pool's shard count.
const MaxShards = 4096

// record is a pool's durable record. Records written before prefixes have
// none: their shards' lease names are "{pool}/{shard}" as before.
type record struct {
	Shards  []string             `json:"shards"`
	Prefix  string               `json:"prefix,omitempty"`  // the shards' lease name template ("": "{pool}/{shard}")
	Done    map[string]uint64    `json:"done,omitempty"`    // shard -> token that marked it done; kept forever, also for shards a shrink removed
	DoneBy  map[string]string    `json:"done_by,omitempty"` // shard -> holder that marked it done
	Waiting map[string]time.Time `json:"waiting,omitempty"` // holder with no shard -> live until
	Standby map[string]standby   `json:"standby,omitempty"` // suspect shard -> who is first in line
}

type standby struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"` // the reservation lapses then (grace end + the claim's TTL)
}

// ShardName returns the lease name (and the fence it raises) of shard in
// pool with prefix template prefix: "{pool}/{shard}" when prefix is "",
// else prefix with shard in place of ShardPlaceholder (a name ending in
// "/", a prefix fence). Every mapping of a shard to its lease goes through
// it.
func ShardName(pool, prefix, shard string) string {
	if prefix == "" {
		return pool + "/" + shard
	}
	return strings.Replace(prefix, ShardPlaceholder, shard, 1)
}

// shardOf is ShardName's inverse for one pool: the shard whose lease name
// name is, ok false when name is none of the pool's form (the shard is then
// still to be looked up among the pool's shards).
func shardOf(pool, prefix, name string) (shard string, ok bool) {
	before, after := pool+"/", ""
	if prefix != "" {
		before, after, _ = strings.Cut(prefix, ShardPlaceholder)
	}
	rest, ok := strings.CutPrefix(name, before)
	if !ok {
		return "", false
	}
	shard, ok = strings.CutSuffix(rest, after)
	if !ok || CheckName("shard", shard) != nil {
		return "", false
	}
	return shard, true
}

// CheckPrefix checks a prefix template ("" passes: no prefix): it holds
// ShardPlaceholder exactly once, ends in "/", does not start with "/" (a
// resource key has no leading slash), has no "//", "%" or "\\" (the template
// is the key's bytes, never decoded) and is at most MaxPrefix bytes.
// ErrInvalid otherwise. Whether each shard's name is a resource key
// a lease may have (the resolver's rules and FENCEPROXY_RESOURCE_DEPTH) is
// the caller's check (the control API's).
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("%w: prefix %q: %s (e.g. \"reports/daily/{shard}/\")", ErrInvalid, prefix, why)
	}
	switch n := strings.Count(prefix, ShardPlaceholder); {
	case len(prefix) > MaxPrefix:
		return bad(fmt.Sprintf("at most %d bytes", MaxPrefix))
	case n != 1:
		return bad(fmt.Sprintf("want %s exactly once, found %d", ShardPlaceholder, n))
	case !strings.HasSuffix(prefix, "/"):
		return bad("a prefix ends in \"/\"")
	case strings.HasPrefix(prefix, "/"):
		return bad("a resource key has no leading \"/\"")
	case strings.Contains(prefix, "//"):
		return bad("an empty segment (\"//\")")
	case strings.ContainsAny(prefix, "%\\"):
		// The template is the key itself, never decoded: "%2F" would name a
		// fence that no request path reaches.
		return bad("no \"%\" or \"\\\\\": write the key's bytes as they are, not percent-encoded")
	}
	return nil
}

// CheckName checks a pool or shard name: 1 to 128 bytes of ASCII letters,
// digits, '.', '_' and '-', not "." or "..". ErrInvalid otherwise.
func CheckName(what, s string) error {
	if s == "" || len(s) > 128 || s == "." || s == ".." {
		return fmt.Errorf("%w: %s %q: want 1 to 128 of [A-Za-z0-9._-], not . or ..", ErrInvalid, what, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %s %q: want 1 to 128 of [A-Za-z0-9._-]", ErrInvalid, what, s)
		}
	}
	return nil
}

// Check returns the shard names spec defines, checked. ErrInvalid for both
// or neither of Shards and Names, a count outside [1, MaxShards], a bad or
// repeated name, a bad Prefix (CheckPrefix).
func (spec Spec) Check() ([]string, error) {
	if err := CheckPrefix(spec.Prefix); err != nil {
		return nil, err
	}
	switch {
	case (spec.Shards > 0) == (len(spec.Names) > 0):
		return nil, fmt.Errorf("%w: give shards (a count) or names, one of them", ErrInvalid)
	case spec.Shards > MaxShards || len(spec.Names) > MaxShards:
		return nil, fmt.Errorf("%w: at most %d shards", ErrInvalid, MaxShards)
	case spec.Shards < 0:
		return nil, fmt.Errorf("%w: shards must be positive", ErrInvalid)
	}
	if spec.Shards > 0 {
		out := make([]string, spec.Shards)
		for i := range out {
			out[i] = strconv.Itoa(i)
		}
		return out, nil
	}
	seen := map[string]bool{}
	for _, n := range spec.Names {
		if err := CheckName("shard", n); err != nil {
			return nil, err
		}
		if seen[n] {
			return nil, fmt.Errorf("%w: shard %q is named twice", ErrInvalid, n)
		}
		seen[n] = true
	}
	return slices.Clone(spec.Names), nil
}

// Pools runs the pool calls over a store and a lease manager. Safe for
// concurrent use; calls on one pool are serialised.
type Pools struct {
	store  Store
	leases Leases
	mu     sync.Mutex
	locks  map[string]*poolLock // only while a call on the pool runs or waits
	events Events
	// views caches each pool's view for HandBack (renews come often, and a
	// view reads every lease of the pool); claims, dones and definitions
	// of this process drop it.
	views map[string]cachedView
	// defining serialises definitions (rare), so that the check that no
	// two pools' lease names overlap sees every other pool's last one.
	defining sync.Mutex
	// prefixed maps each pool with a prefix template to it, for HandBack
	// to find the pool of a lease name ending in "/": read from the store
	// at its first use, kept by Define (pools with a prefix exist in one
	// process only: cluster mode refuses them). Under mu.
	prefixed map[string]string
}

// poolLock serialises the calls on one pool; users counts the calls that
// hold or wait for it, and the last one out removes it, so that names
// asked about (pools that do not exist too) leave nothing behind.
type poolLock struct {
	sync.Mutex
	users int
}

type cachedView struct {
	at time.Time
	v  *view
}

// viewCacheFor bounds how stale a HandBack's view may be.
const viewCacheFor = 250 * time.Millisecond

// Events are optional hooks for metrics; nil fields are skipped.
type Events struct {
	Claimed  func(pool string, sticky bool) // a claim granted a shard
	NoShard  func(pool string)              // a claim found none
	HandBack func(pool string, n int)       // a renew answer asked for n shards back
	Done     func(pool string)              // a shard was marked done
}

// New returns Pools over store, granting shards with leases.
func New(store Store, leases Leases, events Events) *Pools {
	return &Pools{store: store, leases: leases, locks: map[string]*poolLock{}, events: events, views: map[string]cachedView{}}
}

// lock takes pool's lock and returns its unlock.
func (p *Pools) lock(pool string) func() {
	p.mu.Lock()
	l := p.locks[pool]
	if l == nil {
		l = &poolLock{}
		p.locks[pool] = l
	}
	l.users++
	p.mu.Unlock()
	l.Lock()
	return func() {
		p.mu.Lock()
		delete(p.views, pool)
		if l.users--; l.users == 0 {
			delete(p.locks, pool)
		}
		p.mu.Unlock()
		l.Unlock()
	}
}

func (p *Pools) read(pool string) (*record, error) {
	raw, err := p.store.Pool(pool)
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, fmt.Errorf("%w: pool %q is not defined", ErrNotFound, pool)
	}
	var rec record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, fmt.Errorf("pool %q: corrupt record: %w", pool, err)
	}
	return &rec, nil
}

// update runs edit over pool's record (nil: none) and stores what it returns.
func (p *Pools) update(pool string, edit func(rec *record) (*record, error)) error {
	return p.store.UpdatePool(pool, func(raw []byte) ([]byte, error) {
		var rec *record
		if raw != nil {
			rec = &record{}
			if err := json.Unmarshal(raw, rec); err != nil {
				return nil, fmt.Errorf("pool %q: corrupt record: %w", pool, err)
			}
		}
		next, err := edit(rec)
		if err != nil || next == nil {
			return nil, err
		}
		return json.Marshal(next)
	})
}

// Define creates pool with spec's shards, or changes its shards: growing
// adds shards; shards removed must be free (no lease held, suspect or in
// its grace), else ErrBusy naming them. Done marks are kept, also those of
// the shards removed: a shard done stays done when a later definition
// brings it back (done is forever). spec.Prefix names the shards' leases
// (ShardName); changing it renames every shard's lease, so it needs every
// shard free (ErrBusy otherwise). A definition whose lease names overlap
// another pool's (the same name, or one a prefix fence above the other) is
// ErrInvalid. It returns the shard names. Errors: ErrInvalid, ErrBusy,
// store errors.
func (p *Pools) Define(pool string, spec Spec) ([]string, error) {
	if err := CheckName("pool", pool); err != nil {
		return nil, err
	}
	names, err := spec.Check()
	if err != nil {
		return nil, err
	}
	p.defining.Lock()
	defer p.defining.Unlock()
	defer p.lock(pool)()
	cur, err := p.read(pool)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if cur != nil {
		keep := map[string]bool{}
		for _, n := range names {
			keep[n] = true
		}
		view, err := p.view(pool, cur)
		if err != nil {
			return nil, err
		}
		var busy []string
		for _, s := range cur.Shards {
			// A prefix change renames every shard's lease: a holder of the
			// old name would write on while a claim grants the new one.
			if (!keep[s] || cur.Prefix != spec.Prefix) && view.shards[s].live() {
				busy = append(busy, s)
			}
		}
		switch {
		case len(busy) > 0 && cur.Prefix != spec.Prefix:
			return nil, fmt.Errorf("%w: the prefix changes from %q to %q, which renames every shard's lease, and shards %q are held; "+
				"release them (or let their leases and grace end) first", ErrBusy, cur.Prefix, spec.Prefix, busy)
		case len(busy) > 0:
			return nil, fmt.Errorf("%w: %q are held; release them first", ErrBusy, busy)
		}
	}
	if err := p.checkOverlap(pool, spec.Prefix, names); err != nil {
		return nil, err
	}
	err = p.update(pool, func(rec *record) (*record, error) {
		next := &record{Shards: names, Prefix: spec.Prefix}
		if rec != nil {
			// Every done mark stays, also of a shard this removes: grown
			// back, it is still done (never dispatched again).
			next.Waiting, next.Done, next.DoneBy = rec.Waiting, rec.Done, rec.DoneBy
			for s, sb := range rec.Standby {
				if slices.Contains(names, s) {
					if next.Standby == nil {
						next.Standby = map[string]standby{}
					}
					next.Standby[s] = sb
				}
			}
		}
		return next, nil
	})
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.prefixed != nil {
		if spec.Prefix != "" {
			p.prefixed[pool] = spec.Prefix
		} else {
			delete(p.prefixed, pool)
		}
	}
	p.mu.Unlock()
	return names, nil
}

// checkOverlap refuses (ErrInvalid) a definition of pool whose shards'
// lease names would overlap another pool's: the same name, or one a prefix
// fence above the other (two pools would dispatch the same resources, and
// one's tokens would fence the other's holders out). Only names ending in
// "/" can be above others, and "{pool}/{shard}" names of two pools never
// meet, so pools without a prefix are checked only against those with one.
func (p *Pools) checkOverlap(pool, prefix string, names []string) error {
	mine := make(map[string]string, len(names)) // lease name -> shard
	for _, n := range names {
		mine[ShardName(pool, prefix, n)] = n
	}
	return p.store.EachPool(func(other string, raw []byte) error {
		if other == pool {
			return nil
		}
		var rec record
		if err := json.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("pool %q: corrupt record: %w", other, err)
		}
		if prefix == "" && rec.Prefix == "" {
			return nil
		}
		theirs := make(map[string]bool, len(rec.Shards))
		for _, s := range rec.Shards {
			theirs[ShardName(other, rec.Prefix, s)] = true
		}
		clash := func(a string, in map[string]bool) string {
			if in[a] {
				return a
			}
			for i := 0; i < len(a)-1; i++ {
				if a[i] == '/' && in[a[:i+1]] {
					return a[:i+1]
				}
			}
			return ""
		}
		for name, shard := range mine {
			if c := clash(name, theirs); c != "" {
				return fmt.Errorf("%w: shard %q's lease %q is %s pool %q's lease %q: two pools would dispatch the same resources",
					ErrInvalid, shard, name, map[bool]string{true: "also", false: "below"}[c == name], other, c)
			}
		}
		mineSet := make(map[string]bool, len(mine))
		for name := range mine {
			mineSet[name] = true
		}
		for name := range theirs {
			if c := clash(name, mineSet); c != "" {
				return fmt.Errorf("%w: shard %q's lease %q is above pool %q's lease %q: two pools would dispatch the same resources",
					ErrInvalid, mine[c], c, other, name)
			}
		}
		return nil
	})
}

// poolOfPrefixed returns the pool with a prefix template whose shard name
// is name (a name ending in "/"), "" when none.
func (p *Pools) poolOfPrefixed(name string) (pool, shard string, err error) {
	p.mu.Lock()
	loaded := p.prefixed != nil
	p.mu.Unlock()
	if !loaded {
		// Under defining: a definition running now is either in the store
		// read here or updates the index after it is set.
		p.defining.Lock()
		defer p.defining.Unlock()
		idx := map[string]string{}
		err := p.store.EachPool(func(pool string, raw []byte) error {
			var rec record
			if err := json.Unmarshal(raw, &rec); err != nil {
				return fmt.Errorf("pool %q: corrupt record: %w", pool, err)
			}
			if rec.Prefix != "" {
				idx[pool] = rec.Prefix
			}
			return nil
		})
		if err != nil {
			return "", "", err
		}
		p.mu.Lock()
		if p.prefixed == nil {
			p.prefixed = idx
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for pl, prefix := range p.prefixed {
		if s, ok := shardOf(pl, prefix, name); ok {
			return pl, s, nil
		}
	}
	return "", "", nil
}

// shardView is a shard's lease as a pool sees it.
type shardView struct {
	name  string
	lease *lease.Lease // nil: never acquired
	state lease.State  // "" without a lease
	done  bool
}

// live reports whether the shard's lease keeps others out.
func (s shardView) live() bool {
	return s.lease != nil && (s.state == lease.StateHeld || s.state == lease.StateSuspect || s.state == lease.StateGrace)
}

// view is a pool's shards and holders at one moment.
type view struct {
	prefix  string // the record's prefix template
	now     time.Time
	order   []string
	shards  map[string]shardView
	counts  map[string]int // live holder -> shards it holds (live leases)
	open    int            // shards not done
	waiting map[string]time.Time
}

func (p *Pools) view(pool string, rec *record) (*view, error) {
	v := &view{prefix: rec.Prefix, now: p.leases.Now(), order: rec.Shards, shards: map[string]shardView{}, counts: map[string]int{}, waiting: map[string]time.Time{}}
	for _, s := range rec.Shards {
		_, done := rec.Done[s]
		v.shards[s] = shardView{name: s, done: done}
		if !done {
			v.open++
		}
	}
	// The shards' lease names all start with what comes before the
	// shard's name: "{pool}/", or the prefix template's part before it.
	before := pool + "/"
	if rec.Prefix != "" {
		before, _, _ = strings.Cut(rec.Prefix, ShardPlaceholder)
	}
	entries, err := p.leases.List(before, "", math.MaxInt)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		s, ok := shardOf(pool, rec.Prefix, e.Name)
		if !ok {
			continue
		}
		sv, ok := v.shards[s]
		if !ok {
			continue
		}
		l := e.Lease
		sv.lease, sv.state = &l, e.State
		v.shards[s] = sv
		if sv.live() && !sv.done {
			v.counts[l.Holder]++
		}
	}
	for h, until := range rec.Waiting {
		if until.After(v.now) {
			v.waiting[h] = until
		}
	}
	return v, nil
}

// share returns the share of each live holder with extra counted live too.
func (v *view) share(extra string) (share, live int) {
	live = len(v.counts)
	for h := range v.waiting {
		if _, ok := v.counts[h]; !ok {
			live++
		}
	}
	if extra != "" {
		_, holds := v.counts[extra]
		_, waits := v.waiting[extra]
		if !holds && !waits {
			live++
		}
	}
	if live == 0 {
		return v.open, 0
	}
	return (v.open + live - 1) / live, live
}

// score is the rendezvous weight of holder for shard: FNV-1a over both,
// finalised with splitmix64's mixer.
func score(holder, shard string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(holder))
	h.Write([]byte{0})
	h.Write([]byte(shard))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Claim is a granted claim: the shard and its lease (token, expiry).
type Claim struct {
	Shard  string
	Lease  lease.Lease
	Sticky bool // the holder held this shard last
}

// Claim grants holder a lease for ttl on one free shard of pool: the shard
// it held last when free, else the free shard ranked highest for it by
// rendezvous hashing; never one done, one another holder stands by for, or
// beyond the holder's share. The lease is lease.Manager.Acquire's: a new
// token, the fence raised to it through the barrier. With standby, when no
// shard is free, the holder is put first in line for a suspect shard.
// Errors: *NoShardError (ErrNoShard) with AllDone when every shard of the
// pool is done (nothing changes), else when the holder is at its share or
// none is free (the holder then counts as live for ttl/2, so the others'
// shares make room for it; claiming again renews that); lease.ErrInvalid
// for a holder or TTL that lease.Manager.Acquire would refuse (checked
// first: nothing changes); ErrNotFound; the lease manager's and the
// store's errors.
func (p *Pools) Claim(ctx context.Context, pool, holder string, ttl time.Duration, wantStandby bool) (Claim, error) {
	// The lease manager's own rules, before anything else: a claim it
	// would refuse must not count as waiting nor stand by.
	if err := p.leases.Check(holder, ttl); err != nil {
		return Claim{}, err
	}
	defer p.lock(pool)()
	rec, err := p.read(pool)
	if err != nil {
		return Claim{}, err
	}
	v, err := p.view(pool, rec)
	if err != nil {
		return Claim{}, err
	}
	if v.open == 0 {
		// Nothing will ever be dispatched: a distinct answer, not a share
		// of 0.
		if p.events.NoShard != nil {
			p.events.NoShard(pool)
		}
		return Claim{}, &NoShardError{AllDone: true}
	}
	share, _ := v.share(holder)
	held := v.counts[holder]
	if free := v.free(holder, rec.Standby); held >= share || (held >= v.floor(holder) && free > 0 && free <= v.deficit(holder)) {
		// At its share; or at the floor while the free shards are all
		// needed by holders below it (fair within one, not first come).
		if p.events.NoShard != nil {
			p.events.NoShard(pool)
		}
		return Claim{}, &NoShardError{AtShare: true, Share: share, Held: held}
	}
	type cand struct {
		shard  string
		sticky bool
		mine   bool // reserved for this holder
		score  uint64
	}
	var cands []cand
	for _, s := range v.order {
		sv := v.shards[s]
		if sv.done || sv.live() {
			continue
		}
		sb, reserved := rec.Standby[s]
		if reserved && sb.Holder != holder && sb.Until.After(v.now) {
			continue
		}
		cands = append(cands, cand{shard: s, sticky: sv.lease != nil && sv.lease.Holder == holder,
			mine: reserved && sb.Holder == holder, score: score(holder, s)})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.mine != b.mine {
			return boolFirst(a.mine)
		}
		if a.sticky != b.sticky {
			return boolFirst(a.sticky)
		}
		return cmp.Compare(b.score, a.score)
	})
	for _, c := range cands {
		l, err := p.leases.Acquire(ctx, ShardName(pool, rec.Prefix, c.shard), holder, ttl)
		if errors.Is(err, lease.ErrHeld) {
			continue // taken with a lease call meanwhile
		}
		if err != nil {
			return Claim{}, err
		}
		_, waits := rec.Waiting[holder]
		sb, reserved := rec.Standby[c.shard]
		if waits || reserved {
			err := p.update(pool, func(r *record) (*record, error) {
				if r == nil {
					return nil, nil
				}
				delete(r.Waiting, holder)
				if s, ok := r.Standby[c.shard]; ok && s == sb {
					delete(r.Standby, c.shard)
				}
				return r, nil
			})
			if err != nil {
				// The caller gets an error: it must not keep a lease it
				// does not know of (it would hold the shard to its expiry
				// and grace). Best effort: a failed release leaves the
				// lease to expire.
				if _, rerr := p.leases.Release(ShardName(pool, rec.Prefix, c.shard), holder, l.Token); rerr != nil {
					return Claim{}, fmt.Errorf("%w (and the lease granted with token %d was not released: %v)", err, l.Token, rerr)
				}
				return Claim{}, err
			}
		}
		if p.events.Claimed != nil {
			p.events.Claimed(pool, c.sticky)
		}
		return Claim{Shard: c.shard, Lease: l, Sticky: c.sticky}, nil
	}
	// None free: wait (count as live), perhaps stand by for a suspect shard.
	noShard := &NoShardError{Share: share, Held: held}
	for _, s := range v.order {
		sv := v.shards[s]
		if sv.live() && !sv.done {
			if g := p.leases.GraceEnds(*sv.lease); noShard.RetryAt.IsZero() || g.Before(noShard.RetryAt) {
				noShard.RetryAt = g
			}
		}
	}
	var standFor string
	if wantStandby {
		for _, s := range v.order {
			sv := v.shards[s]
			sb, reserved := rec.Standby[s]
			if sv.done || sv.state != lease.StateSuspect || sv.lease.Holder == holder {
				continue
			}
			if reserved && sb.Until.After(v.now) {
				if sb.Holder == holder {
					standFor = s
					break
				}
				continue
			}
			if standFor == "" {
				standFor = s
			}
		}
	}
	err = p.update(pool, func(r *record) (*record, error) {
		if r == nil {
			return nil, fmt.Errorf("%w: pool %q was removed", ErrNotFound, pool)
		}
		if r.Waiting == nil {
			r.Waiting = map[string]time.Time{}
		}
		for h, until := range r.Waiting {
			if !until.After(v.now) {
				delete(r.Waiting, h)
			}
		}
		if held == 0 {
			// Live for half the claim's TTL: a waiting holder claims again
			// well within it, and a dead one stops holding up the
			// others' shares soon.
			r.Waiting[holder] = v.now.Add(ttl / 2)
		}
		if standFor != "" {
			if r.Standby == nil {
				r.Standby = map[string]standby{}
			}
			r.Standby[standFor] = standby{Holder: holder, Until: standbyUntil(p.leases, *v.shards[standFor].lease, holder, ttl, v.now)}
		}
		return r, nil
	})
	if err != nil {
		return Claim{}, err
	}
	noShard.Standby = standFor
	if p.events.NoShard != nil {
		p.events.NoShard(pool)
	}
	return Claim{}, noShard
}

// standbyUntil is when holder's reservation of the suspect shard whose
// lease is l lapses, holder having claimed with ttl at now: the suspect
// lease's grace end plus ttl, but no later than a lease of holder's own
// claim would keep others out, ttl plus its grace from now. A dead standby
// thus blocks a shard no longer than a dead holder of a lease with its
// claim's TTL (within the lease manager's [MinTTL, MaxTTL]); a live one
// claims again within ttl/2 and renews the reservation.
func standbyUntil(leases Leases, l lease.Lease, holder string, ttl time.Duration, now time.Time) time.Time {
	until := leases.GraceEnds(l).Add(ttl)
	if own := leases.GraceEnds(lease.Lease{Holder: holder, TTL: ttl, ExpiresAt: now.Add(ttl)}); own.Before(until) {
		until = own
	}
	return until
}

func boolFirst(a bool) int {
	if a {
		return -1
	}
	return 1
}

// HandBack returns the pool and shard whose lease name is name (ShardName:
// "{pool}/{shard}", or a pool's prefix template with the shard; pool "":
// name is no shard of a defined pool, nil shards) and the shards of that
// pool that holder must hand back: with
// more than its share, the holder's shards it ranks lowest (by rendezvous
// hashing), its count above the share; nil within its share. It reads the
// store only (any process may answer it), through a view of the pool up to
// 250 ms old (a claim, done or definition in this process drops it).
// Errors: store errors.
func (p *Pools) HandBack(name, holder string) (pool, shard string, shards []string, err error) {
	if strings.HasSuffix(name, "/") {
		// Only a prefix template's names end in "/".
		if pool, shard, err = p.poolOfPrefixed(name); err != nil || pool == "" {
			return "", "", nil, err
		}
	} else {
		var ok bool
		pool, shard, ok = cutLast(name)
		if !ok || CheckName("pool", pool) != nil || CheckName("shard", shard) != nil {
			return "", "", nil, nil
		}
	}
	now := p.leases.Now()
	p.mu.Lock()
	c, ok := p.views[pool]
	p.mu.Unlock()
	v := c.v
	if !ok || now.Sub(c.at) > viewCacheFor || now.Before(c.at) {
		rec, err := p.read(pool)
		if errors.Is(err, ErrNotFound) {
			return "", "", nil, nil
		}
		if err != nil {
			return "", "", nil, err
		}
		if v, err = p.view(pool, rec); err != nil {
			return "", "", nil, err
		}
		p.mu.Lock()
		p.views[pool] = cachedView{at: now, v: v}
		p.mu.Unlock()
	}
	if _, ok := v.shards[shard]; !ok || ShardName(pool, v.prefix, shard) != name {
		// Not this pool's name for the shard: "{pool}/{shard}" of a pool
		// with a prefix is an ordinary lease.
		return "", "", nil, nil
	}
	out := v.handBack(holder)
	if len(out) > 0 && p.events.HandBack != nil {
		p.events.HandBack(pool, len(out))
	}
	return pool, shard, out, nil
}

// floor returns the floor of open shards over live holders (with extra
// counted live too).
func (v *view) floor(extra string) int {
	_, live := v.share(extra)
	if live == 0 {
		return v.open
	}
	return v.open / live
}

// liveHolders returns the live holders, with extra ("": none).
func (v *view) liveHolders(extra string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(h string) {
		if h != "" && !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	for h := range v.counts {
		add(h)
	}
	for h := range v.waiting {
		add(h)
	}
	add(extra)
	slices.Sort(out)
	return out
}

// deficit returns how many shards the live holders other than extra lack
// to reach the floor.
func (v *view) deficit(extra string) int {
	f, d := v.floor(extra), 0
	for _, h := range v.liveHolders(extra) {
		if h != extra && v.counts[h] < f {
			d += f - v.counts[h]
		}
	}
	return d
}

// free returns the shards a claim of holder could get now.
func (v *view) free(holder string, standbys map[string]standby) int {
	n := 0
	for _, s := range v.order {
		sv := v.shards[s]
		if sv.done || sv.live() {
			continue
		}
		if sb, ok := standbys[s]; ok && sb.Holder != holder && sb.Until.After(v.now) {
			continue
		}
		n++
	}
	return n
}

// handBack returns the shards holder must hand back: those above the share
// (a holder joined); or, while holders below the floor need more than the
// free shards, one, when holder is at the share (ceil) beyond the r
// holders (open mod live, first by name) that may keep it.
func (v *view) handBack(holder string) []string {
	share, _ := v.share("")
	excess := v.counts[holder] - share
	if excess <= 0 && share > v.floor("") && v.counts[holder] == share && v.deficit("") > v.free("", nil) {
		_, live := v.share("")
		r := v.open % live
		var atShare []string
		for _, h := range v.liveHolders("") {
			if v.counts[h] >= share {
				atShare = append(atShare, h)
			}
		}
		if i := slices.Index(atShare, holder); i >= r {
			excess = 1
		}
	}
	if excess <= 0 {
		return nil
	}
	var mine []string
	for _, s := range v.order {
		sv := v.shards[s]
		if sv.live() && !sv.done && sv.lease.Holder == holder {
			mine = append(mine, s)
		}
	}
	slices.SortFunc(mine, func(a, b string) int { return cmp.Compare(score(holder, a), score(holder, b)) })
	return mine[:excess]
}

func cutLast(name string) (pool, shard string, ok bool) {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			return name[:i], name[i+1:], true
		}
	}
	return "", "", false
}

// Done marks shard of pool complete with holder's token: the shard's lease
// is released (lease.Manager.Release: holder must hold it with token, else
// lease.ErrLost) and the shard is never dispatched again, also after a
// shrink and a regrow. Marking it again with the same holder and token
// succeeds (a retry); with another token or holder it is ErrDone.
// It returns the shard's lease name (ShardName).
// Errors: ErrNotFound; ErrDone; lease.ErrLost (a stale holder); store errors.
func (p *Pools) Done(pool, shard, holder string, token uint64) (string, error) {
	defer p.lock(pool)()
	rec, err := p.read(pool)
	if err != nil {
		return "", err
	}
	if !slices.Contains(rec.Shards, shard) {
		return "", fmt.Errorf("%w: pool %q has no shard %q", ErrNotFound, pool, shard)
	}
	name := ShardName(pool, rec.Prefix, shard)
	if t, done := rec.Done[shard]; done {
		by, known := rec.DoneBy[shard]
		if t == token && (by == holder || !known) { // !known: a mark stored before holders were
			return name, nil
		}
		return "", fmt.Errorf("%w: %q was marked done with token %d by another holder or token", ErrDone, name, t)
	}
	// Release first: it checks holder and token atomically. A crash before
	// the mark leaves the shard free and not done: it runs again (at least
	// once), and this token's done is refused from then on.
	if _, err := p.leases.Release(name, holder, token); err != nil {
		return "", err
	}
	err = p.update(pool, func(r *record) (*record, error) {
		if r == nil {
			return nil, fmt.Errorf("%w: pool %q was removed", ErrNotFound, pool)
		}
		if r.Done == nil {
			r.Done = map[string]uint64{}
		}
		r.Done[shard] = token
		if r.DoneBy == nil {
			r.DoneBy = map[string]string{}
		}
		r.DoneBy[shard] = holder
		delete(r.Standby, shard)
		return r, nil
	})
	if err != nil {
		return "", err
	}
	if p.events.Done != nil {
		p.events.Done(pool)
	}
	return name, nil
}

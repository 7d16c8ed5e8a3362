// Package lease grants time-bounded ownership of a resource to one holder at
// a time and issues a fencing token with every grant (see the second
// background document and Kleppmann 2016). Tokens come from the same durable
// store the proxy checks, and a grant raises the resource's fence in the same
// synced transaction ("fence-ahead"), so the previous holder's writes are
// refused from the moment the new holder has its token.
//
// Life of a lease: acquire (new token) -> renew within TTL -> release, or
// expiry. After expiry a grace period (default 2/3 of the TTL, two renew
// periods) keeps others out, and the holder may still renew and keep its
// token: a short network blip does not move the lease (anti-flapping). A
// holder that has not renewed for RevokeAfter (default TTL/2) is reported as
// suspect before it expires.
package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// Store is what leases need from durable storage (the stores under store/ provide it).
type Store interface {
	// UpdateLease runs fn over the stored record of name and name's fence
	// maximum, and durably commits fn's record and fence raise together.
	UpdateLease(name string, fn func(record []byte, fenceMax uint64) (next []byte, raise uint64, err error)) error
	// Lease returns the stored record of name, nil when there is none.
	Lease(name string) ([]byte, error)
	// EachLease calls fn with every stored record, in name order.
	EachLease(fn func(name string, record []byte) error) error
	// LeasesFrom calls fn with up to limit stored records whose name starts
	// with prefix and sorts after after, in name order, reading from after
	// on (a seek): a page costs its own records.
	LeasesFrom(prefix, after string, limit int, fn func(name string, record []byte) error) error
	// RemoveLease runs fn over name's record and fence maximum in one
	// atomic step and deletes the record (never the fence) when fn returns
	// true; fn is not called when there is no record.
	RemoveLease(name string, fn func(record []byte, fenceMax uint64) (remove bool, err error)) error
}

// Barrier runs a change that raises a resource's fence through the fence
// barrier (fence.Barrier provides it): writes on the resource wait for its
// outcome, uploads below the new maximum are cut off, and it returns only
// once no write below it is in flight upstream, so the previous holder's
// writes can no longer be applied. It returns the maximum raise left; raise's
// own error comes back as is.
type Barrier interface {
	RaiseWith(ctx context.Context, resource string, raise func() error) (uint64, error)
}

// Floorer is implemented by barriers with prefix fences (fence.Barrier):
// Floor returns the largest maximum among the fences that cover keys
// name covers too (the prefix fences above name, and for a prefix fence
// every fence below it), which a new token for name must pass, or its
// holder would share keys with a holder of an overlapping lease at an
// equal or larger token. With a barrier without it, 0.
type Floorer interface {
	Floor(name string) (uint64, error)
}

var (
	// ErrHeld: another holder has the lease (or it is in its grace period) (409).
	ErrHeld = errors.New("lease is held by another holder")
	// ErrLost: renew or release by a holder that no longer has the lease: wrong
	// holder or token, expired past its grace, released, or fenced by a larger token (409).
	ErrLost = errors.New("lease was lost")
	// ErrNotFound: no lease of that name was ever acquired, or its record
	// was swept (Sweep) (404).
	ErrNotFound = errors.New("no such lease")
	// ErrInvalid: a bad TTL or holder (400).
	ErrInvalid = errors.New("invalid lease request")
	// ErrExhausted: the next token would pass 2^63-1 (409); an operator must
	// reset the resource's fence with the admin API.
	ErrExhausted = errors.New("fencing tokens exhausted for this resource: the next token would pass 2^63-1; an operator must reset the fence with the admin API: DELETE /v1/fences/{resource}?confirm={resource}")
)

// HeldError is ErrHeld with the current holder and expiry.
type HeldError struct {
	Holder    string
	ExpiresAt time.Time
	GraceEnds time.Time // nobody else may acquire before this
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("lease is held by %q until %s (others may acquire from %s)", e.Holder,
		e.ExpiresAt.Format(time.RFC3339Nano), e.GraceEnds.Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrHeld) hold.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// State of a lease at a moment.
type State string

const (
	StateHeld     State = "held"     // renewed within RevokeAfter
	StateSuspect  State = "suspect"  // not renewed for RevokeAfter, not yet expired
	StateGrace    State = "grace"    // expired; only the holder may renew, nobody else may acquire
	StateExpired  State = "expired"  // past expiry and grace: anyone may acquire
	StateReleased State = "released" // released by its holder or an operator
)

// Lease is one lease's durable record. Token is the fencing token of the
// current (or last) grant; tokens of one lease only ever increase.
type Lease struct {
	Name       string        `json:"-"`
	Holder     string        `json:"holder"`
	Token      uint64        `json:"token"`
	TTL        time.Duration `json:"ttl"`
	AcquiredAt time.Time     `json:"acquired_at"`
	RenewedAt  time.Time     `json:"renewed_at"`
	ExpiresAt  time.Time     `json:"expires_at"`
	Released   bool          `json:"released"`
}

// Options configures a Manager. Zero values get the defaults in brackets.
type Options struct {
	MinTTL      time.Duration    // shortest TTL accepted (FENCEPROXY_LEASE_MIN_TTL); 0: any TTL above 0
	MaxTTL      time.Duration    // longest TTL accepted (FENCEPROXY_LEASE_MAX_TTL); 0: no bound
	Grace       *time.Duration   // fixed grace after expiry, 0 for none [nil: 2/3 of the lease's TTL]
	RevokeAfter time.Duration    // silence after which a holder is suspect [0: half the TTL]
	Now         func() time.Time // clock [time.Now]
	Logger      *slog.Logger     // nil: discard
	// Retention is how long a record of an expired or released lease is
	// kept, beyond its grace and one more TTL, before Sweep removes it
	// (FENCEPROXY_LEASE_RETENTION): a record is removable from ExpiresAt +
	// grace + TTL + Retention on. Removing one never lowers a token: the
	// fence of the lease's name, kept apart from the record, holds every
	// token granted, and the next grant passes it.
	Retention time.Duration
	// Watched, when set, limits Watch's reports to the leases it accepts
	// (cluster mode: those of the shards this replica owns, so that each
	// suspect holder is reported by one replica), and Sweep's removals to
	// them too. nil: every lease.
	Watched func(name string) bool
}

// Manager grants, renews and releases leases over a Store. It is safe for
// concurrent use; the Store's transactions serialise grants of one lease.
type Manager struct {
	store   Store
	barrier Barrier
	opts    Options

	sweepMu    sync.Mutex
	sweepAfter string        // where the next Sweep reads on; "" from the start
	removed    atomic.Uint64 // records Sweep removed
}

// NewManager returns a Manager over store whose grants raise fences through
// barrier.
func NewManager(store Store, barrier Barrier, opts Options) *Manager {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{store: store, barrier: barrier, opts: opts}
}

// grace returns the grace period of a lease with ttl.
func (m *Manager) grace(ttl time.Duration) time.Duration {
	if m.opts.Grace != nil {
		return *m.opts.Grace
	}
	return ttl * 2 / 3
}

func (m *Manager) revokeAfter(ttl time.Duration) time.Duration {
	if m.opts.RevokeAfter > 0 {
		return m.opts.RevokeAfter
	}
	return ttl / 2
}

// GraceEnds returns the moment l's grace ends: from then on (unless its
// holder renews before) anyone may acquire it.
func (m *Manager) GraceEnds(l Lease) time.Time { return l.ExpiresAt.Add(m.grace(l.TTL)) }

// Now returns the Manager's clock's time.
func (m *Manager) Now() time.Time { return m.opts.Now() }

// StateAt returns l's state at now.
func (m *Manager) StateAt(l Lease, now time.Time) State {
	switch {
	case l.Released:
		return StateReleased
	case now.Before(l.ExpiresAt):
		if now.Sub(l.RenewedAt) >= m.revokeAfter(l.TTL) {
			return StateSuspect
		}
		return StateHeld
	case now.Before(l.ExpiresAt.Add(m.grace(l.TTL))):
		return StateGrace
	default:
		return StateExpired
	}
}

func decode(name string, rec []byte) (*Lease, error) {
	if rec == nil {
		return nil, nil
	}
	var l Lease
	if err := json.Unmarshal(rec, &l); err != nil {
		return nil, fmt.Errorf("lease %q: corrupt record: %w", name, err)
	}
	l.Name = name
	return &l, nil
}

// Acquire grants name to holder for ttl and returns the lease with a new
// fencing token, larger than every token issued for name and than name's
// fence maximum. The grant and the fence raised to its token are one synced
// transaction, run through the barrier: when Acquire returns, the previous
// holder's uploads are cut off and none of its writes is still in flight.
// Every successful Acquire issues a new token, also to the holder that had
// the lease (a restarted process fences its previous incarnation). Errors:
// *HeldError (ErrHeld) while another holder has it or it is in its grace;
// ErrInvalid for a TTL outside [MinTTL, MaxTTL] or an empty holder;
// ErrExhausted; store errors; the barrier's errors (its drain timeout, ctx
// ended) after the grant: the lease is then granted, and the holder
// acquiring again gets a new token. The TTL runs from the grant; when the
// drain took more than a third of it, Acquire runs it from the end of the
// drain instead, and fails with ErrLost if another holder acquired the lease
// meanwhile (it had expired past its grace while the drain went on).
func (m *Manager) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	if err := m.Check(holder, ttl); err != nil {
		return Lease{}, err
	}
	now := m.opts.Now()
	var floor uint64
	if f, ok := m.barrier.(Floorer); ok {
		var err error
		if floor, err = f.Floor(name); err != nil {
			return Lease{}, err
		}
	}
	var granted, previous Lease
	raised, err := m.barrier.RaiseWith(ctx, name, func() error {
		return m.store.UpdateLease(name, m.grant(name, holder, ttl, now, floor, &granted, &previous))
	})
	if err != nil && raised != 0 {
		m.opts.Logger.Warn("lease granted, but writes with smaller tokens were still in flight", "lease", name,
			"holder", holder, "token", granted.Token, "error", err.Error())
		return Lease{}, fmt.Errorf("lease %q was granted to %q with token %d, but writes with smaller tokens are still in flight; acquire again: %w",
			name, holder, granted.Token, err)
	}
	if err != nil {
		return Lease{}, err
	}
	if waited := m.opts.Now().Sub(now); waited > ttl/3 {
		// The drain took a good part of the TTL, which runs from the grant:
		// run it from now, so that the answer never hands out a lease about
		// to expire, or one taken over meanwhile.
		refreshed, err := m.refresh(name, holder, granted.Token)
		if err != nil {
			m.opts.Logger.Warn("lease granted, but lost while writes with smaller tokens drained", "lease", name,
				"holder", holder, "token", granted.Token, "waited", waited.String(), "error", err.Error())
			return Lease{}, fmt.Errorf("lease %q was granted to %q with token %d, then lost while writes with smaller tokens drained for %s: %w",
				name, holder, granted.Token, waited, err)
		}
		granted = refreshed
	}
	m.opts.Logger.Info("lease acquired", "lease", name, "holder", holder, "token", granted.Token,
		"ttl", ttl.String(), "previous_holder", previous.Holder, "previous_token", previous.Token)
	return granted, nil
}

// grant is Acquire's transaction: it fills granted and previous, and leaves
// granted zero when it refuses.
func (m *Manager) grant(name, holder string, ttl time.Duration, now time.Time, floor uint64, granted, previous *Lease) func(rec []byte, fenceMax uint64) ([]byte, uint64, error) {
	return func(rec []byte, fenceMax uint64) ([]byte, uint64, error) {
		*granted = Lease{}
		cur, err := decode(name, rec)
		if err != nil {
			return nil, 0, err
		}
		last := max(fenceMax, floor) // above every overlapping fence too
		*previous = Lease{}
		if cur != nil {
			*previous = *cur
			last = max(last, cur.Token)
			// A fence raised past the lease's token (an operator, another
			// coordinator) has cut its holder off: the lease is free.
			if st := m.StateAt(*cur, now); cur.Holder != holder && fenceMax <= cur.Token && (st == StateHeld || st == StateSuspect || st == StateGrace) {
				return nil, 0, &HeldError{Holder: cur.Holder, ExpiresAt: cur.ExpiresAt, GraceEnds: cur.ExpiresAt.Add(m.grace(cur.TTL))}
			}
		}
		if last >= math.MaxInt64 {
			return nil, 0, ErrExhausted
		}
		g := Lease{Name: name, Holder: holder, Token: last + 1, TTL: ttl, AcquiredAt: now, RenewedAt: now, ExpiresAt: now.Add(ttl)}
		next, err := json.Marshal(g)
		if err == nil {
			*granted = g
		}
		return next, g.Token, err
	}
}

// Renew extends holder's lease on name by its TTL from now, keeping its
// token. A renew during the grace period keeps the lease. ErrLost when
// holder with token no longer has it (another holder acquired, it was
// released, the grace passed, or the fence was raised past token).
func (m *Manager) Renew(name, holder string, token uint64) (Lease, error) {
	return m.change(name, func(rec []byte, fenceMax uint64, now time.Time) (*Lease, error) {
		cur, err := m.owned(name, rec, fenceMax, holder, token, now)
		if err == nil {
			cur.RenewedAt, cur.ExpiresAt = now, now.Add(cur.TTL)
		}
		return cur, err
	})
}

// Release ends holder's lease on name at once: others may acquire without
// waiting for the grace. ErrLost as for Renew.
func (m *Manager) Release(name, holder string, token uint64) (Lease, error) {
	l, err := m.change(name, func(rec []byte, fenceMax uint64, now time.Time) (*Lease, error) {
		cur, err := m.owned(name, rec, fenceMax, holder, token, now)
		if err == nil {
			cur.Released, cur.ExpiresAt = true, now
		}
		return cur, err
	})
	if err == nil {
		m.opts.Logger.Info("lease released", "lease", name, "holder", holder, "token", token)
	}
	return l, err
}

// refresh runs holder's new lease on name from now, as long as nobody took
// it since the grant: unlike Renew it does not care whether the lease
// expired while its acquire drained, since nobody else was granted it.
// ErrLost when another holder acquired it, it was released, or the fence
// was raised past token.
func (m *Manager) refresh(name, holder string, token uint64) (Lease, error) {
	return m.change(name, func(rec []byte, fenceMax uint64, now time.Time) (*Lease, error) {
		cur, err := decode(name, rec)
		switch {
		case err != nil:
			return nil, err
		case cur == nil || cur.Holder != holder || cur.Token != token:
			return nil, fmt.Errorf("%w: %q was acquired by another holder meanwhile", ErrLost, name)
		case cur.Released:
			return nil, fmt.Errorf("%w: %q was released meanwhile", ErrLost, name)
		case fenceMax > token:
			return nil, fmt.Errorf("%w: the fence of %q was raised to %d meanwhile", ErrLost, name, fenceMax)
		}
		cur.RenewedAt, cur.ExpiresAt = now, now.Add(cur.TTL)
		return cur, nil
	})
}

// ForceRelease ends name's lease whoever holds it (an operator's call); its
// token stays spent and the fence stays where it is. ErrNotFound when name
// never had a lease, or its record was swept.
func (m *Manager) ForceRelease(name string) (Lease, error) {
	l, err := m.change(name, func(rec []byte, _ uint64, now time.Time) (*Lease, error) {
		cur, err := decode(name, rec)
		if err == nil && cur == nil {
			err = ErrNotFound
		}
		if err == nil {
			cur.Released, cur.ExpiresAt = true, now
		}
		return cur, err
	})
	if err == nil {
		m.opts.Logger.Warn("lease force-released", "lease", name, "holder", l.Holder, "token", l.Token)
	}
	return l, err
}

// change stores the lease that edit makes of name's record, without raising
// the fence, and returns it.
func (m *Manager) change(name string, edit func(rec []byte, fenceMax uint64, now time.Time) (*Lease, error)) (Lease, error) {
	now := m.opts.Now()
	var changed Lease
	err := m.store.UpdateLease(name, func(rec []byte, fenceMax uint64) ([]byte, uint64, error) {
		l, err := edit(rec, fenceMax, now)
		if err != nil {
			return nil, 0, err
		}
		changed = *l
		next, err := json.Marshal(changed)
		return next, 0, err
	})
	if err != nil {
		return Lease{}, err
	}
	return changed, nil
}

// Get returns name's lease and its state now. ErrNotFound when name never
// had one, or its record was swept.
func (m *Manager) Get(name string) (Lease, State, error) {
	rec, err := m.store.Lease(name)
	if err != nil {
		return Lease{}, "", err
	}
	cur, err := decode(name, rec)
	if err != nil {
		return Lease{}, "", err
	}
	if cur == nil {
		return Lease{}, "", ErrNotFound
	}
	st := m.StateAt(*cur, m.opts.Now())
	if st == StateSuspect {
		m.opts.Logger.Warn("lease holder is suspect: no renew within the revoke threshold", "lease", name,
			"holder", cur.Holder, "token", cur.Token, "renewed_at", cur.RenewedAt, "expires_at", cur.ExpiresAt)
	}
	return *cur, st, nil
}

// owned returns the current lease if holder with token still has it at now.
func (m *Manager) owned(name string, rec []byte, fenceMax uint64, holder string, token uint64, now time.Time) (*Lease, error) {
	cur, err := decode(name, rec)
	if err != nil {
		return nil, err
	}
	switch {
	case cur == nil:
		return nil, fmt.Errorf("%w: %q was never acquired", ErrLost, name)
	case cur.Holder != holder || cur.Token != token:
		switch m.StateAt(*cur, now) {
		case StateReleased:
			return nil, fmt.Errorf("%w: %q is held by no one: %q released it (token %d)", ErrLost, name, cur.Holder, cur.Token)
		case StateExpired:
			return nil, fmt.Errorf("%w: %q is held by no one: the lease of %q (token %d) expired at %s", ErrLost, name, cur.Holder, cur.Token, cur.ExpiresAt.Format(time.RFC3339Nano))
		}
		return nil, fmt.Errorf("%w: %q is now held by %q with token %d", ErrLost, name, cur.Holder, cur.Token)
	case fenceMax > token:
		return nil, fmt.Errorf("%w: the fence of %q was raised to %d", ErrLost, name, fenceMax)
	}
	switch m.StateAt(*cur, now) {
	case StateReleased:
		return nil, fmt.Errorf("%w: %q was released", ErrLost, name)
	case StateExpired:
		return nil, fmt.Errorf("%w: %q expired at %s and its grace has passed", ErrLost, name, cur.ExpiresAt.Format(time.RFC3339Nano))
	}
	return cur, nil
}

// Check applies Acquire's rules for a holder and a TTL: holder 1 to 256
// bytes of valid UTF-8, not blank, no control characters, no U+FFFD; ttl
// above 0 and within [MinTTL, MaxTTL]. ErrInvalid otherwise. Callers that
// act for a future Acquire (a pool claim) check with it first.
func (m *Manager) Check(holder string, ttl time.Duration) error {
	switch {
	case holder == "":
		return fmt.Errorf("%w: holder is empty", ErrInvalid)
	case len(holder) > 256:
		return fmt.Errorf("%w: holder is longer than 256 bytes", ErrInvalid)
	case strings.TrimSpace(holder) == "" || strings.IndexFunc(holder, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: holder is blank or has control characters", ErrInvalid)
	case !utf8.ValidString(holder) || strings.ContainsRune(holder, utf8.RuneError):
		// JSON decoding turns every invalid byte into U+FFFD: two holders
		// would become one.
		return fmt.Errorf("%w: holder is not valid UTF-8 (or holds U+FFFD)", ErrInvalid)
	case ttl <= 0 || ttl < m.opts.MinTTL || (m.opts.MaxTTL > 0 && ttl > m.opts.MaxTTL):
		return fmt.Errorf("%w: ttl %s is outside [%s, %s]", ErrInvalid, ttl, m.opts.MinTTL, m.opts.MaxTTL)
	}
	return nil
}

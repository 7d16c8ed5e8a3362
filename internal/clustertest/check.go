package clustertest

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Kind is what a request of the workload did.
type Kind string

// The kinds of requests.
const (
	KindWrite Kind = "write" // PUT through the proxy listener with a token
	KindLease Kind = "lease" // POST /v1/leases/{name}: acquire
	KindRaise Kind = "raise" // PUT /v1/fences/{resource}: admin raise
	KindRead  Kind = "read"  // GET through the proxy listener
)

// Op is one request of the workload as the client saw it.
type Op struct {
	Kind     Kind
	Resource string
	// Token: for a write the token sent; for an acknowledged lease acquire
	// the token granted; for an acknowledged raise the maximum answered.
	Token   uint64
	Replica int
	Start   time.Time
	End     time.Time
	Status  int    // 0 on a transport error
	Err     string // the transport error's class
	Acked   bool   // a write's 2xx, a lease acquire's 201, a raise's 200
	ID      string // a write's X-Write-Id
}

// Outcome is the op's status, or its transport error's class.
func (o Op) Outcome() string {
	if o.Status == 0 {
		return "error " + o.Err
	}
	return fmt.Sprint(o.Status)
}

// Ledger collects the ops of a run.
type Ledger struct {
	mu       sync.Mutex
	ops      []Op
	answered int // ops with an HTTP status
}

// Add records op.
func (l *Ledger) Add(op Op) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	if op.Status != 0 {
		l.answered++
	}
	l.mu.Unlock()
}

// Answered is the number of ops recorded with an HTTP status.
func (l *Ledger) Answered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.answered
}

// Ops returns the ops recorded so far.
func (l *Ledger) Ops() []Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Op(nil), l.ops...)
}

// Violation is a broken invariant.
type Violation struct {
	Check    string // which invariant
	Resource string
	Detail   string
}

func (v Violation) String() string { return fmt.Sprintf("%s on %s: %s", v.Check, v.Resource, v.Detail) }

// The invariants (Violation.Check).
const (
	CheckOrder        = "applied tokens decreased"
	CheckBelowAck     = "applied below an acknowledged raise or lease"
	CheckStaleAcked   = "write acknowledged below an earlier acknowledged token"
	CheckLeaseOrder   = "lease token not above an earlier acknowledged token"
	CheckLeaseDup     = "lease token granted twice"
	CheckRaiseLost    = "raise answered below an earlier acknowledged token"
	CheckFenceLost    = "acknowledged token above the final fence"
	CheckLeaseLost    = "acknowledged lease token above the final lease record"
	CheckAboveFence   = "applied token above the final fence"
	CheckFenceMissing = "final fence not readable"
	CheckAboveStored  = "applied token above the maximum stored in etcd"
	CheckTruncated    = "a body cut short was applied"
)

// CheckTruncatedApplies: a lenient backend applied no body cut short (every cut
// reached it as a reset, which it does not apply).
func CheckTruncatedApplies(applies []Apply) []Violation {
	var out []Violation
	for _, a := range applies {
		if a.Truncated {
			out = append(out, Violation{CheckTruncated, a.Resource, fmt.Sprintf("token %d (write %s): %d bytes applied at %s, its connection closed (FIN) before the end",
				a.Token, a.ID, a.Bytes, a.At.Format("15:04:05.000"))})
		}
	}
	return out
}

// CheckApplied: per resource, the backend applied tokens in non-decreasing
// order.
func CheckApplied(applies []Apply) []Violation {
	var out []Violation
	last := map[string]Apply{}
	for _, a := range applies {
		if p, ok := last[a.Resource]; ok && a.Token < p.Token {
			out = append(out, Violation{CheckOrder, a.Resource, fmt.Sprintf("token %d (write %s) applied at %s after token %d (write %s) at %s",
				a.Token, a.ID, a.At.Format("15:04:05.000"), p.Token, p.ID, p.At.Format("15:04:05.000"))})
			continue
		}
		last[a.Resource] = a
	}
	return out
}

// ackIndex is a resource's acknowledged ops sorted by End with the running
// maximum of their tokens (only the kinds asked for).
type ackIndex struct {
	ends []time.Time
	max  []uint64
	who  []Op
}

func newAckIndex(ops []Op, kinds ...Kind) map[string]*ackIndex {
	by := map[string][]Op{}
	for _, o := range ops {
		if !o.Acked {
			continue
		}
		for _, k := range kinds {
			if o.Kind == k {
				by[o.Resource] = append(by[o.Resource], o)
			}
		}
	}
	out := map[string]*ackIndex{}
	for r, list := range by {
		sort.Slice(list, func(i, j int) bool { return list[i].End.Before(list[j].End) })
		ix := &ackIndex{}
		var m uint64
		var who Op
		for _, o := range list {
			if o.Token >= m {
				m, who = o.Token, o
			}
			ix.ends = append(ix.ends, o.End)
			ix.max = append(ix.max, m)
			ix.who = append(ix.who, who)
		}
		out[r] = ix
	}
	return out
}

// before returns the largest token acknowledged strictly before t, and the
// op that carried it.
func (ix *ackIndex) before(t time.Time) (uint64, Op, bool) {
	if ix == nil {
		return 0, Op{}, false
	}
	i := sort.Search(len(ix.ends), func(i int) bool { return !ix.ends[i].Before(t) })
	if i == 0 {
		return 0, Op{}, false
	}
	return ix.max[i-1], ix.who[i-1], true
}

func describe(o Op) string {
	return fmt.Sprintf("%s %d via replica %d [%s..%s]", o.Kind, o.Token, o.Replica, o.Start.Format("15:04:05.000"), o.End.Format("15:04:05.000"))
}

// CheckAcks checks what the clients were told against itself: an op that
// started after another was acknowledged sees its token. A write is
// acknowledged only with a token at least every token acknowledged before
// it started (writes, raises, leases); a lease acquire grants a token above
// all of them; a raise answers a maximum at least all of them; no lease
// token is granted twice on a name.
func CheckAcks(ops []Op) []Violation {
	var out []Violation
	ix := newAckIndex(ops, KindWrite, KindLease, KindRaise)
	leases := map[string]map[uint64]Op{}
	for _, o := range ops {
		if !o.Acked {
			continue
		}
		m, who, ok := ix[o.Resource].before(o.Start)
		switch o.Kind {
		case KindWrite:
			if ok && o.Token < m {
				out = append(out, Violation{CheckStaleAcked, o.Resource, fmt.Sprintf("%s acknowledged after %s", describe(o), describe(who))})
			}
		case KindRaise:
			if ok && o.Token < m {
				out = append(out, Violation{CheckRaiseLost, o.Resource, fmt.Sprintf("%s answered after %s", describe(o), describe(who))})
			}
		case KindLease:
			if ok && o.Token <= m {
				out = append(out, Violation{CheckLeaseOrder, o.Resource, fmt.Sprintf("%s granted after %s", describe(o), describe(who))})
			}
			if leases[o.Resource] == nil {
				leases[o.Resource] = map[uint64]Op{}
			}
			if p, dup := leases[o.Resource][o.Token]; dup {
				out = append(out, Violation{CheckLeaseDup, o.Resource, fmt.Sprintf("%s and %s", describe(p), describe(o))})
			}
			leases[o.Resource][o.Token] = o
		}
	}
	return out
}

// CheckAppliedAfterAcks: no write is applied with a token below a raise or
// lease acquire acknowledged before it was applied (the raise drains the
// smaller tokens' writes before it answers).
func CheckAppliedAfterAcks(applies []Apply, ops []Op) []Violation {
	var out []Violation
	ix := newAckIndex(ops, KindLease, KindRaise)
	for _, a := range applies {
		if m, who, ok := ix[a.Resource].before(a.At); ok && a.Token < m {
			out = append(out, Violation{CheckBelowAck, a.Resource, fmt.Sprintf("token %d (write %s) applied at %s after %s",
				a.Token, a.ID, a.At.Format("15:04:05.000"), describe(who))})
		}
	}
	return out
}

// Final is what the replicas answer after the run, per resource.
type Final struct {
	Fence   uint64 // GET /v1/fences/{resource} (0: 404)
	Lease   uint64 // GET /v1/leases/{resource} token (0: 404)
	Missing string // why it could not be read ("" when read)
}

// CheckFinal: no acknowledged token is lost (the final fence is at least
// every acknowledged token, the lease record at least every acknowledged
// lease token), and no applied token is above the final fence. applies
// must be collected before the final reads: a write applied after them may
// have had its raise commit after them (its client left while the raise
// waited for etcd).
func CheckFinal(ops []Op, applies []Apply, final map[string]Final) []Violation {
	var out []Violation
	ackMax, leaseMax := map[string]Op{}, map[string]Op{}
	for _, o := range ops {
		if !o.Acked || o.Kind == KindRead {
			continue
		}
		if o.Token >= ackMax[o.Resource].Token {
			ackMax[o.Resource] = o
		}
		if o.Kind == KindLease && o.Token >= leaseMax[o.Resource].Token {
			leaseMax[o.Resource] = o
		}
	}
	resources := map[string]bool{}
	for r := range ackMax {
		resources[r] = true
	}
	for r := range final {
		resources[r] = true
	}
	for r := range resources {
		f, ok := final[r]
		if !ok || f.Missing != "" {
			out = append(out, Violation{CheckFenceMissing, r, f.Missing})
			continue
		}
		if o := ackMax[r]; o.Token > f.Fence {
			out = append(out, Violation{CheckFenceLost, r, fmt.Sprintf("%s, final fence %d", describe(o), f.Fence)})
		}
		if o := leaseMax[r]; o.Token > f.Lease {
			out = append(out, Violation{CheckLeaseLost, r, fmt.Sprintf("%s, final lease token %d", describe(o), f.Lease)})
		}
	}
	for _, a := range applies {
		if f, ok := final[a.Resource]; ok && f.Missing == "" && a.Token > f.Fence {
			out = append(out, Violation{CheckAboveFence, a.Resource, fmt.Sprintf("token %d (write %s) applied, final fence %d", a.Token, a.ID, f.Fence)})
		}
	}
	return out
}

// CheckStored: every applied token is at most its resource's maximum as
// etcd stores it, read after the applies were collected (a write is
// forwarded only once its raise is durable). stored has no entry for a
// resource whose maximum could not be read: its applies are not checked.
func CheckStored(applies []Apply, stored map[string]uint64) []Violation {
	var out []Violation
	for _, a := range applies {
		if m, ok := stored[a.Resource]; ok && a.Token > m {
			out = append(out, Violation{CheckAboveStored, a.Resource, fmt.Sprintf("token %d (write %s) applied, etcd holds %d", a.Token, a.ID, m)})
		}
	}
	return out
}

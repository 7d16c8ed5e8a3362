// Package groupcommit commits concurrent raises of fencing-token maxima
// together, one transaction for all the raises queued while the previous
// one committed: Badger syncs its write-ahead log once per transaction, and
// etcd takes one round trip and one raft entry per Txn. There is no
// background goroutine: the first raiser leads, commits a batch from the
// head of the queue (its own raise first), and hands the lead to the next
// queued raiser. A raise alone costs one commit, as without the group.
package groupcommit

import "sync"

// Request is one raise in a batch: Commit reads Resource and Token and sets
// Result (the maximum after the raise, >= Token) or Err.
type Request struct {
	Resource string
	Token    uint64
	Result   uint64
	Err      error

	lead chan struct{} // closed when this raiser must lead the next batch
	done chan struct{} // closed when Result and Err are set
}

// Group queues concurrent raises and commits them in batches. Build it with
// New; it is safe for concurrent use.
type Group struct {
	take   func(queue []*Request) int
	commit func(batch []*Request)

	mu      sync.Mutex
	queue   []*Request
	busy    bool  // a leader is committing
	batches int64 // batches taken (tests compare it with the store's own count)
}

// New returns a Group. take returns how many requests from the head of
// queue (never empty) the next batch holds, at least 1; it runs under the
// Group's lock, so it must be quick. commit commits batch (in one
// transaction) and sets every request's Result or Err; the Group answers
// the raisers once it returns.
func New(take func(queue []*Request) int, commit func(batch []*Request)) *Group {
	return &Group{take: take, commit: commit}
}

// Upto is a take of at most n requests.
func Upto(n int) func(queue []*Request) int {
	return func(queue []*Request) int { return min(len(queue), n) }
}

// Raise queues the raise of resource to t, commits it with the raises
// queued beside it, and returns what commit set for it.
func (g *Group) Raise(resource string, t uint64) (uint64, error) {
	req := &Request{Resource: resource, Token: t, lead: make(chan struct{}), done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, req)
	leader := !g.busy
	g.busy = true
	g.mu.Unlock()
	if !leader {
		select {
		case <-req.done:
			return req.Result, req.Err
		case <-req.lead: // req is at the head of the queue
		}
	}
	g.mu.Lock()
	n := max(1, min(g.take(g.queue), len(g.queue)))
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.batches++
	g.mu.Unlock()

	g.commit(batch)
	for _, r := range batch {
		close(r.done)
	}

	g.mu.Lock()
	if len(g.queue) > 0 {
		close(g.queue[0].lead)
	} else {
		g.busy = false
		g.queue = nil
	}
	g.mu.Unlock()
	<-req.done
	return req.Result, req.Err
}

// Batches returns how many batches were taken (each one commit).
func (g *Group) Batches() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.batches
}

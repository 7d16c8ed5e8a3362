package clustertest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/shard"
)

// Replica is one fenceproxy replica as a separate process.
type Replica interface {
	// ID is its FENCEPROXY_REPLICA_ID (the id in its shards' owner keys).
	ID() string
	// ProxyURL and ControlURL are http://host:port of its listeners.
	ProxyURL() string
	ControlURL() string
	// Signal sends sig to the process (SIGSTOP, SIGCONT).
	Signal(sig syscall.Signal) error
	// Kill sends SIGKILL and waits until the process exited.
	Kill()
	// Restart starts it again with the same configuration and waits until
	// it serves.
	Restart() error
}

// Config is a run.
type Config struct {
	Replicas []Replica
	Etcd     *etcdtest.Cluster
	// Cut[i] are the TCP proxies replica i reaches the etcd members
	// through (its FENCEPROXY_ETCD_ENDPOINTS): cutting them all cuts it off.
	Cut     [][]*etcdtest.Proxy
	Backend *Backend

	Prefix     string // FENCEPROXY_ETCD_PREFIX of the replicas
	Shards     int    // FENCEPROXY_SHARDS
	AdminToken string
	TTL        time.Duration // FENCEPROXY_SHARD_TTL
	LockDelay  time.Duration // FENCEPROXY_LOCK_DELAY
	// SlowApply is the range of X-Apply-Delay of the slow writes: below
	// the abandon grace (a write the proxy gave up on is applied within
	// it), above the validity margin and the TTL (so that a new owner that
	// waits no lock-delay admits before it is applied).
	SlowApply [2]time.Duration

	Resources int           // number of resources (default 20)
	Workers   int           // concurrent workers (default 32)
	Duration  time.Duration // how long the workers and faults run
	// MinRequests: past Duration the run goes on until this many
	// requests were answered, for at most another Duration (a slow
	// machine). 0: none.
	MinRequests int
	Seed        uint64
	// Teeth: the replicas run without the protection; the faults are the
	// kinds that then break it, and the run stops early once the backend
	// applied a decreasing token.
	Teeth bool
}

// Report is what a run counted and found.
type Report struct {
	Requests int            // requests answered with an HTTP status
	Errors   int            // requests that ended with a transport error
	Outcomes map[string]int // "kind status" -> count
	Faults   map[string]int // fault kind -> count
	Applied  int            // writes the backend applied
	// AppliedLate: writes applied once the final reads began (held
	// against etcd's maximum only; see CheckFinal).
	AppliedLate int
	Failovers   []time.Duration
	Violations  []Violation
	Elapsed     time.Duration
}

// FaultCount is the number of faults injected.
func (r *Report) FaultCount() int {
	n := 0
	for _, c := range r.Faults {
		n += c
	}
	return n
}

// Log writes the report through logf.
func (r *Report) Log(logf func(string, ...any)) {
	logf("%d requests answered, %d transport errors, %d writes applied, %d faults, %d violations, in %v",
		r.Requests, r.Errors, r.Applied, r.FaultCount(), len(r.Violations), r.Elapsed.Round(time.Second))
	logf("requests by outcome: %s", sortedCounts(r.Outcomes))
	logf("faults by kind: %s", sortedCounts(r.Faults))
	if r.AppliedLate > 0 {
		logf("%d writes applied once the final reads began (forwarded late: checked against etcd's maximum only)", r.AppliedLate)
	}
	if len(r.Failovers) > 0 {
		fo := append([]time.Duration(nil), r.Failovers...)
		sort.Slice(fo, func(i, j int) bool { return fo[i] < fo[j] })
		logf("failover after SIGKILL of an owner, no etcd fault meanwhile (kill to the first write acknowledged on one of its resources through another replica; TTL + lock-delay is the model): n=%d min %v median %v max %v",
			len(fo), fo[0].Round(time.Millisecond), fo[len(fo)/2].Round(time.Millisecond), fo[len(fo)-1].Round(time.Millisecond))
	}
	byCheck := map[string]int{}
	for _, v := range r.Violations {
		byCheck[v.Check]++
	}
	if len(byCheck) > 0 {
		logf("violations by invariant: %s", sortedCounts(byCheck))
	}
	for i, v := range r.Violations {
		if i == 20 {
			logf("... %d more violations", len(r.Violations)-20)
			break
		}
		logf("violation: %s", v)
	}
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, m[k])
	}
	return b.String()
}

// run is the state of one run.
type run struct {
	t      testing.TB
	cfg    Config
	ledger Ledger
	client *http.Client
	etcd   *clientv3.Client

	resources []string
	next      []atomic.Uint64 // the last token handed out per resource
	ids       atomic.Uint64

	down []atomic.Bool // replica i is stopped, killed or restarting: workers avoid it
	// reserved[ri]: a fault's scenario runs on resource ri; workers leave
	// it alone (their raises would cut the scenario's upload or make its
	// token stale before the fault).
	reserved []atomic.Bool

	mu        sync.Mutex
	faults    map[string]int
	failovers []time.Duration
	// etcdQuiet is held during each etcd fault (until every member is
	// healthy again) and while a failover is measured, so that the
	// failover after a replica's SIGKILL is not an etcd fault's as well.
	etcdQuiet sync.Mutex
}

// Run runs the workers and the faults for cfg.Duration, heals the cluster,
// reads the final fences and checks every invariant.
func Run(t testing.TB, cfg Config) *Report {
	t.Helper()
	if cfg.Resources == 0 {
		cfg.Resources = 20
	}
	if cfg.Workers == 0 {
		cfg.Workers = 32
	}
	if cfg.Prefix == "" {
		cfg.Prefix = shard.DefaultPrefix
	}
	began := time.Now()
	r := &run{t: t, cfg: cfg, faults: map[string]int{}, down: make([]atomic.Bool, len(cfg.Replicas))}
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, MaxConnsPerHost: 0}
	t.Cleanup(tr.CloseIdleConnections)
	r.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Etcd.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	r.etcd = cli
	for i := range cfg.Resources {
		r.resources = append(r.resources, fmt.Sprintf("fault/r%02d", i))
	}
	r.next = make([]atomic.Uint64, len(r.resources))
	r.reserved = make([]atomic.Bool, len(r.resources))

	ctx, cancel := context.WithTimeout(context.Background(), 2*cfg.Duration)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(cfg.Duration):
		}
		for ctx.Err() == nil && r.ledger.Answered() < cfg.MinRequests {
			time.Sleep(100 * time.Millisecond)
		}
		if ctx.Err() == nil && cfg.MinRequests > 0 && time.Since(began) > cfg.Duration+time.Second {
			t.Logf("ran %v, past %v, to answer %d requests", time.Since(began).Round(time.Second), cfg.Duration, cfg.MinRequests)
		}
		cancel()
	}()
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(100+w)))
		wg.Go(func() { r.worker(ctx, rng) })
	}
	var faults sync.WaitGroup
	faults.Go(func() { r.replicaFaults(ctx, rand.New(rand.NewPCG(cfg.Seed, 1))) })
	if !cfg.Teeth {
		faults.Go(func() { r.etcdFaults(ctx, rand.New(rand.NewPCG(cfg.Seed, 2))) })
	}
	if cfg.Teeth {
		// Stop as soon as the backend applied a decreasing token.
		go func() {
			for ctx.Err() == nil {
				if cfg.Backend.Decreases() > 0 {
					t.Logf("the backend applied a decreasing token after %v: stopping the run", time.Since(began).Round(time.Second))
					cancel()
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	faults.Wait()
	wg.Wait()

	// Heal: every replica up and ready; the writes still in the replicas
	// (clients gone, a raise waiting for etcd) forwarded; then the final
	// reads.
	r.heal()
	if !cfg.Backend.WaitIdle(2*time.Second, 60*time.Second) {
		t.Logf("the backend was still applying writes 60s after the run: final reads taken anyway")
	}
	// Every write applied before the final reads is held against them;
	// later ones only against etcd's maximum, read after all.
	before := cfg.Backend.Applies()
	final := r.finalState()

	ops := r.ledger.Ops()
	applies := cfg.Backend.Applies()
	rep := &Report{Outcomes: map[string]int{}, Faults: r.faults, Applied: len(applies), Failovers: r.failovers,
		AppliedLate: len(applies) - len(before)}
	for _, o := range ops {
		rep.Outcomes[string(o.Kind)+" "+o.Outcome()]++
		if o.Status == 0 {
			rep.Errors++
		} else {
			rep.Requests++
		}
	}
	rep.Violations = append(rep.Violations, CheckApplied(applies)...)
	rep.Violations = append(rep.Violations, CheckTruncatedApplies(applies)...)
	rep.Violations = append(rep.Violations, CheckAppliedAfterAcks(applies, ops)...)
	rep.Violations = append(rep.Violations, CheckAcks(ops)...)
	rep.Violations = append(rep.Violations, CheckFinal(ops, before, final)...)
	stored := r.storedFences()
	rep.Violations = append(rep.Violations, CheckStored(applies, stored)...)
	for i, v := range rep.Violations {
		// A stale answer, or a lost maximum?
		if m, ok := stored[v.Resource]; ok && (v.Check == CheckAboveFence || v.Check == CheckFenceLost) {
			rep.Violations[i].Detail += fmt.Sprintf(" (etcd holds %d)", m)
		}
	}
	rep.Elapsed = time.Since(began)
	return rep
}

func (r *run) fault(kind string) {
	r.mu.Lock()
	r.faults[kind]++
	r.mu.Unlock()
}

func (r *run) newID() string { return "w" + strconv.FormatUint(r.ids.Add(1), 10) }

// token hands out the next token of resource i.
func (r *run) token(i int) uint64 { return r.next[i].Add(1) }

// seen raises resource i's counter to tok (a token the proxy granted).
func (r *run) seen(i int, tok uint64) {
	for {
		cur := r.next[i].Load()
		if cur >= tok || r.next[i].CompareAndSwap(cur, tok) {
			return
		}
	}
}

// pickReplica picks a random replica that is not known to be down.
func (r *run) pickReplica(rng *rand.Rand, not int) int {
	var up []int
	for i := range r.cfg.Replicas {
		if i != not && !r.down[i].Load() {
			up = append(up, i)
		}
	}
	if len(up) == 0 {
		n := rng.IntN(len(r.cfg.Replicas))
		if n == not {
			n = (n + 1) % len(r.cfg.Replicas)
		}
		return n
	}
	return up[rng.IntN(len(up))]
}

// errClass names a transport error for the outcome counts.
func errClass(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, net.ErrClosed):
		return "closed"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return "other: " + err.Error()
}

// writeOpts are the variations of a write.
type writeOpts struct {
	size       int           // body size
	stall      time.Duration // pause after half the body
	gate       chan struct{} // the second half waits for it to close
	applyDelay time.Duration // X-Apply-Delay
	id         string
}

// write sends PUT /{resource} with tok to replica i and records it.
func (r *run) write(ctx context.Context, ri, i int, tok uint64, o writeOpts) Op {
	res := r.resources[ri]
	if o.id == "" {
		o.id = r.newID()
	}
	if o.size == 0 {
		o.size = 64
	}
	body := bytes.Repeat([]byte{'x'}, o.size)
	half := o.size / 2
	var rd io.Reader = bytes.NewReader(body)
	if o.stall > 0 || o.gate != nil {
		rd = io.MultiReader(bytes.NewReader(body[:half]), &pause{d: o.stall, gate: o.gate}, bytes.NewReader(body[half:]))
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, r.cfg.Replicas[i].ProxyURL()+"/"+res, rd)
	req.ContentLength = int64(o.size)
	req.Header.Set(HeaderToken, strconv.FormatUint(tok, 10))
	req.Header.Set(HeaderWriteID, o.id)
	if o.applyDelay > 0 {
		req.Header.Set(HeaderApplyDelay, o.applyDelay.String())
	}
	op := Op{Kind: KindWrite, Resource: res, Token: tok, Replica: i, ID: o.id, Start: time.Now()}
	resp, err := r.client.Do(req)
	op.End = time.Now()
	if err != nil {
		op.Err = errClass(err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		op.End = time.Now()
		op.Status = resp.StatusCode
		op.Acked = resp.StatusCode/100 == 2
	}
	r.ledger.Add(op)
	return op
}

// pause is a reader that returns no byte: it waits d, or until gate
// closes, then ends.
type pause struct {
	d    time.Duration
	gate chan struct{}
	done bool
}

func (p *pause) Read([]byte) (int, error) {
	if !p.done {
		p.done = true
		if p.gate != nil {
			<-p.gate
		} else {
			time.Sleep(p.d)
		}
	}
	return 0, io.EOF
}

// acquire is POST /v1/leases/{resource} on replica i.
func (r *run) acquire(ctx context.Context, ri, i int) Op {
	res := r.resources[ri]
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.Replicas[i].ControlURL()+"/v1/leases/"+res,
		strings.NewReader(`{"holder":"fault-holder","ttl":"5s"}`))
	req.Header.Set("Content-Type", "application/json")
	op := Op{Kind: KindLease, Resource: res, Replica: i, Start: time.Now()}
	var l struct{ Token string }
	r.control(req, &op, http.StatusCreated, &l)
	if op.Acked {
		tok, err := strconv.ParseUint(l.Token, 10, 64)
		if err != nil {
			r.t.Errorf("lease acquire of %s answered token %q", res, l.Token)
			op.Acked = false
		}
		op.Token = tok
		r.seen(ri, tok)
	}
	r.ledger.Add(op)
	return op
}

// raise is the admin call PUT /v1/fences/{resource} {"token": tok} on replica i.
func (r *run) raise(ctx context.Context, ri, i int, tok uint64) Op {
	res := r.resources[ri]
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, r.cfg.Replicas[i].ControlURL()+"/v1/fences/"+res,
		strings.NewReader(fmt.Sprintf(`{"token":"%d"}`, tok)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+r.cfg.AdminToken)
	op := Op{Kind: KindRaise, Resource: res, Replica: i, Start: time.Now()}
	var f struct{ Token string }
	r.control(req, &op, http.StatusOK, &f)
	if op.Acked {
		m, err := strconv.ParseUint(f.Token, 10, 64)
		if err != nil || m < tok {
			r.t.Errorf("raise of %s to %d answered token %q", res, tok, f.Token)
			op.Acked = false
		}
		op.Token = m
		r.seen(ri, m)
	}
	r.ledger.Add(op)
	return op
}

// control sends a control API request and decodes a JSON answer of status
// ok into out.
func (r *run) control(req *http.Request, op *Op, ok int, out any) {
	resp, err := r.client.Do(req)
	op.End = time.Now()
	if err != nil {
		op.Err = errClass(err)
		return
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	op.End = time.Now()
	op.Status = resp.StatusCode
	if err != nil {
		return
	}
	if resp.StatusCode == ok {
		if err := json.Unmarshal(raw, out); err != nil {
			r.t.Errorf("%s %s: status %d, body %q: %v", req.Method, req.URL, resp.StatusCode, raw, err)
			return
		}
		op.Acked = true
	}
}

// read is GET /{resource} through replica i.
func (r *run) read(ctx context.Context, ri, i int) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.Replicas[i].ProxyURL()+"/"+r.resources[ri], nil)
	op := Op{Kind: KindRead, Resource: r.resources[ri], Replica: i, Start: time.Now()}
	resp, err := r.client.Do(req)
	if err != nil {
		op.Err = errClass(err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		op.Status = resp.StatusCode
	}
	op.End = time.Now()
	r.ledger.Add(op)
}

// worker takes over random resources with rising tokens through random
// replicas until ctx ends: write sessions (one token, one to three
// writes, some of them stalling uploads or slow to apply), lease acquires
// followed by writes with the lease's token, admin raises, reads.
func (r *run) worker(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		ri := rng.IntN(len(r.resources))
		if r.reserved[ri].Load() {
			continue
		}
		var failed bool
		switch p := rng.Float64(); {
		case p < 0.62:
			tok := r.token(ri)
			for range 1 + rng.IntN(3) {
				op := r.write(ctx, ri, r.pickReplica(rng, -1), tok, r.writeVariant(rng))
				failed = failed || op.Status == 0
				if op.Status == http.StatusConflict || ctx.Err() != nil {
					break
				}
			}
		case p < 0.74:
			op := r.acquire(ctx, ri, r.pickReplica(rng, -1))
			failed = op.Status == 0
			if op.Acked {
				for range 1 + rng.IntN(2) {
					if w := r.write(ctx, ri, r.pickReplica(rng, -1), op.Token, r.writeVariant(rng)); w.Status == http.StatusConflict || ctx.Err() != nil {
						break
					}
				}
			}
		case p < 0.86:
			op := r.raise(ctx, ri, r.pickReplica(rng, -1), r.token(ri))
			failed = op.Status == 0
		default:
			r.read(ctx, ri, r.pickReplica(rng, -1))
		}
		if failed {
			// A replica just killed: do not spin on refused connections.
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// writeVariant: most writes are small; 5% are uploads of 96-160 KiB (past
// the proxy's 64 KiB fast path, so that they stream) that pause after half
// their body (a fifth of them longer than an idle timeout of 1s); 0.5% are
// slow to apply.
func (r *run) writeVariant(rng *rand.Rand) writeOpts {
	var o writeOpts
	o.size = 32 + rng.IntN(1024)
	if rng.Float64() < 0.05 {
		o.size = 96<<10 + rng.IntN(64<<10)
		o.stall = time.Duration(100+rng.IntN(1200)) * time.Millisecond
	}
	if rng.Float64() < 0.005 {
		o.applyDelay = r.slowApply(rng)
	}
	return o
}

func (r *run) slowApply(rng *rand.Rand) time.Duration {
	lo, hi := r.cfg.SlowApply[0], r.cfg.SlowApply[1]
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func jitter(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// ownerOf returns the replica that owns resource ri's shard as etcd says.
func (r *run) ownerOf(ri int) (int, bool) {
	n := shard.Of(r.resources[ri], r.cfg.Shards)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := r.etcd.Get(ctx, r.cfg.Prefix+"shards/"+strconv.Itoa(n)+"/owner")
	if err != nil || len(resp.Kvs) == 0 {
		return -1, false
	}
	var m shard.Member
	if json.Unmarshal(resp.Kvs[0].Value, &m) != nil {
		return -1, false
	}
	for i, rep := range r.cfg.Replicas {
		if rep.ID() == m.ID {
			return i, true
		}
	}
	return -1, false
}

// ownedBy returns the resources whose shards replica i owns.
func (r *run) ownedBy(i int) []int {
	var out []int
	for ri := range r.resources {
		if o, ok := r.ownerOf(ri); ok && o == i {
			out = append(out, ri)
		}
	}
	return out
}

// takeover writes resource ri with new tokens through replicas other than
// not until one is acknowledged or until deadline; it returns when it was.
func (r *run) takeover(rng *rand.Rand, ri, not int, deadline time.Time) (time.Time, bool) {
	for time.Now().Before(deadline) {
		// Bounded: a replica that forwards to the stopped owner may hang.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		op := r.write(ctx, ri, r.pickReplica(rng, not), r.token(ri), writeOpts{})
		cancel()
		if op.Acked {
			return op.End, true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Time{}, false
}

// replicaFaults injects the replica faults one after another until ctx ends.
func (r *run) replicaFaults(ctx context.Context, rng *rand.Rand) {
	if !sleep(ctx, 2*time.Second) {
		return
	}
	for ctx.Err() == nil {
		p := rng.Float64()
		switch {
		case r.cfg.Teeth && p < 0.25, !r.cfg.Teeth && p < 0.4:
			r.stopMidUpload(ctx, rng)
		case r.cfg.Teeth, p < 0.7:
			r.cutOff(ctx, rng)
		default:
			r.killReplica(ctx, rng)
		}
		sleep(ctx, jitter(rng, 300*time.Millisecond, 1500*time.Millisecond))
	}
}

// stopMidUpload: an upload to the owner of a resource sends half its body
// and the owner receives it and starts sending it upstream; then the owner
// is stopped (SIGSTOP). A short stop (within its validity) changes nothing;
// during a long one (past TTL plus lock-delay) another replica takes the
// resource over with a larger token, and the rest of the upload's body is
// sent while the owner is still stopped, so that it is there to read the
// moment it continues (SIGCONT). The owner must not send it on.
func (r *run) stopMidUpload(ctx context.Context, rng *rand.Rand) {
	// A few tries to find an owner that admits the upload now (not in a
	// lock-delay after an earlier fault).
	var (
		ri, owner int
		gate      chan struct{}
		up        sync.WaitGroup
		started   bool
	)
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		ri, owner = -1, -1
		for range 10 {
			ri = rng.IntN(len(r.resources))
			if o, ok := r.ownerOf(ri); ok && !r.down[o].Load() {
				owner = o
				break
			}
		}
		if owner < 0 {
			owner = r.pickReplica(rng, -1)
		}
		r.reserved[ri].Store(true)
		time.Sleep(100 * time.Millisecond) // the workers' requests on it end
		gate = make(chan struct{})
		id := r.newID()
		g, o := gate, owner
		up.Go(func() {
			r.write(context.Background(), ri, o, r.token(ri), writeOpts{size: 128 << 10, gate: g, id: id})
		})
		started = r.cfg.Backend.WaitStarted(id, 2*time.Second)
		r.cfg.Backend.Forget(id)
		if started {
			break
		}
		close(gate)
		up.Wait()
		r.reserved[ri].Store(false)
		time.Sleep(500 * time.Millisecond)
	}
	defer r.reserved[ri].Store(false)
	if !started {
		gate = make(chan struct{}) // nothing waits on it
	}
	long := rng.Float64() < 0.5 || r.cfg.Teeth
	switch {
	case !started:
		r.fault("replica SIGSTOP (the upload was not admitted)")
	case long:
		r.fault("replica SIGSTOP mid-upload, long (takeover)")
	default:
		r.fault("replica SIGSTOP mid-upload, short")
	}
	rep := r.cfg.Replicas[owner]
	r.down[owner].Store(true)
	if err := rep.Signal(syscall.SIGSTOP); err != nil {
		r.t.Errorf("SIGSTOP replica %d: %v", owner, err)
	}
	if long && started {
		// Past the owner's validity, its key's expiry, the TTL and the
		// lock-delay: another replica admits.
		stop := 2*r.cfg.TTL + r.cfg.LockDelay + jitter(rng, 2*time.Second, 3*time.Second)
		end := time.Now().Add(stop)
		r.takeover(rng, ri, owner, end.Add(-300*time.Millisecond))
		time.Sleep(time.Until(end))
	} else {
		time.Sleep(jitter(rng, 300*time.Millisecond, 1200*time.Millisecond))
	}
	close(gate)
	time.Sleep(200 * time.Millisecond) // the rest of the body reaches the stopped owner's socket
	if err := rep.Signal(syscall.SIGCONT); err != nil {
		r.t.Errorf("SIGCONT replica %d: %v", owner, err)
	}
	r.down[owner].Store(false)
	up.Wait()
}

// cutOff cuts a replica off from every etcd member (its TCP proxies). Just
// before, it writes one token on each of (up to 4 of) its resources; while
// cut it keeps sending writes with those same tokens (admitted without a
// raise, so they do not wait for each other) that are slow to apply, so that
// some reach the backend just before the replica's validity ends and are
// applied well after it. A long cut outlasts the lease: other replicas take
// the resources over with larger tokens, which the backend must apply after
// the slow writes. Then the cut heals.
func (r *run) cutOff(ctx context.Context, rng *rand.Rand) {
	i := r.pickReplica(rng, -1)
	owned := r.ownedBy(i)
	rng.Shuffle(len(owned), func(a, b int) { owned[a], owned[b] = owned[b], owned[a] })
	owned = owned[:min(4, len(owned))]
	for _, ri := range owned {
		r.reserved[ri].Store(true)
		defer r.reserved[ri].Store(false)
	}
	time.Sleep(100 * time.Millisecond) // the workers' requests on them end
	toks := map[int]uint64{}
	for _, ri := range owned {
		tok := r.token(ri)
		if op := r.write(ctx, ri, i, tok, writeOpts{}); op.Acked {
			toks[ri] = tok
		}
	}
	long := rng.Float64() < 0.7 || r.cfg.Teeth
	if long {
		r.fault("replica cut off from etcd, long (takeover)")
	} else {
		r.fault("replica cut off from etcd, short")
	}
	r.down[i].Store(true)
	for _, p := range r.cfg.Cut[i] {
		p.Cut()
	}
	cut := time.Now()
	dur := jitter(rng, 500*time.Millisecond, 1500*time.Millisecond)
	if long {
		dur = 2*r.cfg.TTL + r.cfg.LockDelay + jitter(rng, time.Second, 2*time.Second)
	}
	var wg sync.WaitGroup
	// The slow same-token writes, every 100ms until a TTL after the cut
	// (the validity ends within it).
	for ri, tok := range toks {
		wg.Go(func() {
			var sent sync.WaitGroup
			rng := rng2(ri)
			for time.Since(cut) < r.cfg.TTL+300*time.Millisecond {
				d := r.slowApply(rng)
				sent.Go(func() { r.write(context.Background(), ri, i, tok, writeOpts{applyDelay: d}) })
				time.Sleep(100 * time.Millisecond)
			}
			sent.Wait()
		})
	}
	if long {
		for ri := range toks {
			wg.Go(func() {
				time.Sleep(r.cfg.TTL)
				r.takeover(rng2(ri+1000), ri, i, cut.Add(dur))
			})
		}
	}
	time.Sleep(time.Until(cut.Add(dur)))
	for _, p := range r.cfg.Cut[i] {
		p.Restore()
	}
	r.down[i].Store(false)
	wg.Wait()
}

// rng2 is a random source for a helper goroutine (rand.Rand is not safe
// for concurrent use).
func rng2(seed int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(seed)))
}

// killReplica: SIGKILL of the owner of a resource, a restart after a
// moment; meanwhile a write on that resource through another replica
// measures the failover (until one is acknowledged).
func (r *run) killReplica(ctx context.Context, rng *rand.Rand) {
	ri := rng.IntN(len(r.resources))
	i, ok := r.ownerOf(ri)
	if !ok || r.down[i].Load() {
		i, ok = r.pickReplica(rng, -1), false
	}
	if ok {
		r.etcdQuiet.Lock()
		defer r.etcdQuiet.Unlock()
	}
	r.fault("replica SIGKILL")
	r.down[i].Store(true)
	r.cfg.Replicas[i].Kill()
	killed := time.Now()
	var wg sync.WaitGroup
	if ok {
		wg.Go(func() {
			if at, ok := r.takeover(rng2(ri), ri, i, killed.Add(3*r.cfg.TTL+r.cfg.LockDelay+10*time.Second)); ok {
				r.mu.Lock()
				r.failovers = append(r.failovers, at.Sub(killed))
				r.mu.Unlock()
			}
		})
	}
	time.Sleep(jitter(rng, 300*time.Millisecond, 1500*time.Millisecond))
	if err := r.cfg.Replicas[i].Restart(); err != nil {
		r.t.Errorf("restart replica %d: %v", i, err)
	}
	r.down[i].Store(false)
	wg.Wait()
}

// leader returns the index of the etcd leader.
func (r *run) leader() (int, bool) {
	for i, m := range r.cfg.Etcd.Members {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		st, err := r.etcd.Status(ctx, m.ClientURL)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return i, true
		}
	}
	return -1, false
}

// etcdFaults stops (SIGSTOP, SIGCONT) or kills (SIGKILL, restart) the etcd
// leader, one fault at a time, until ctx ends.
func (r *run) etcdFaults(ctx context.Context, rng *rand.Rand) {
	if !sleep(ctx, 3*time.Second) {
		return
	}
	for ctx.Err() == nil {
		r.etcdQuiet.Lock()
		l, ok := r.leader()
		if !ok {
			r.etcdQuiet.Unlock()
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		m := r.cfg.Etcd.Members[l]
		if rng.Float64() < 0.5 {
			r.fault("etcd leader SIGSTOP")
			if err := m.Signal(syscall.SIGSTOP); err != nil {
				r.t.Errorf("SIGSTOP etcd %s: %v", m.Name, err)
			}
			time.Sleep(jitter(rng, time.Second, 3*time.Second))
			if err := m.Signal(syscall.SIGCONT); err != nil {
				r.t.Errorf("SIGCONT etcd %s: %v", m.Name, err)
			}
		} else {
			r.fault("etcd leader SIGKILL")
			m.Kill()
			time.Sleep(jitter(rng, 500*time.Millisecond, 2*time.Second))
			if err := m.Restart(); err != nil {
				r.t.Errorf("restart etcd %s: %v", m.Name, err)
			}
		}
		// Let the cluster settle (every member healthy) before the next.
		for _, mm := range r.cfg.Etcd.Members {
			if err := mm.WaitHealthy(30 * time.Second); err != nil {
				r.t.Errorf("etcd after a fault: %v", err)
			}
		}
		r.etcdQuiet.Unlock()
		sleep(ctx, jitter(rng, 2500*time.Millisecond, 5*time.Second))
	}
}

// heal waits until every replica answers /readyz 200.
func (r *run) heal() {
	for i, rep := range r.cfg.Replicas {
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := r.client.Get(rep.ControlURL() + "/readyz")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				r.t.Errorf("replica %d not ready within 60s after the run (last: %v)", i, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// finalState reads every resource's fence and lease token, retrying 503s
// (a shard still in its lock-delay) for up to a minute.
func (r *run) finalState() map[string]Final {
	out := map[string]Final{}
	deadline := time.Now().Add(60 * time.Second)
	for ri, res := range r.resources {
		f := Final{}
		for _, what := range []string{"fences", "leases"} {
			tok, why := uint64(0), ""
			for {
				var status int
				tok, status, why = r.readToken(r.cfg.Replicas[ri%len(r.cfg.Replicas)].ControlURL() + "/v1/" + what + "/" + res)
				if why == "" || status/100 == 4 || time.Now().After(deadline) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if why != "" {
				f.Missing = what + ": " + why
			}
			if what == "fences" {
				f.Fence = tok
			} else {
				f.Lease = tok
			}
		}
		out[res] = f
	}
	return out
}

// storedFences reads every resource's maximum from etcd itself, past the
// replicas and their caches (store/etcd's key and 8-byte big-endian value);
// a resource it cannot read is left out, and the run fails.
func (r *run) storedFences() map[string]uint64 {
	out := map[string]uint64{}
	for _, res := range r.resources {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := r.etcd.Get(ctx, r.cfg.Prefix+"f/"+res)
		cancel()
		switch {
		case err != nil:
			r.t.Errorf("read the stored maximum of %s: %v", res, err)
		case len(resp.Kvs) == 0:
			out[res] = 0
		case len(resp.Kvs[0].Value) != 8:
			r.t.Errorf("the stored maximum of %s is %d bytes, want 8", res, len(resp.Kvs[0].Value))
		default:
			out[res] = binary.BigEndian.Uint64(resp.Kvs[0].Value)
		}
	}
	return out
}

// readToken GETs a fence or lease and returns its token (0 on 404).
func (r *run) readToken(url string) (uint64, int, string) {
	resp, err := r.client.Get(url)
	if err != nil {
		return 0, 0, err.Error()
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0, resp.StatusCode, ""
	}
	if resp.StatusCode != http.StatusOK {
		return 0, resp.StatusCode, fmt.Sprintf("status %d: %s", resp.StatusCode, raw)
	}
	var v struct{ Token string }
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, resp.StatusCode, fmt.Sprintf("%v: %s", err, raw)
	}
	tok, err := strconv.ParseUint(v.Token, 10, 64)
	if err != nil {
		return 0, resp.StatusCode, fmt.Sprintf("token %q", v.Token)
	}
	return tok, resp.StatusCode, ""
}

// EnvDuration reads a duration from the environment variable name, or def.
func EnvDuration(t testing.TB, name string, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration", name, s)
	}
	return d
}
